package hostedtool

import (
	"strings"

	"github.com/codeinterp/codeinterp/internal/egress"
)

// NetworkDescription tells the model what a network policy lets its
// commands or code reach. The placeholders are the egress proxy's: "$" +
// the secret's name (OpenAI's documented form, "$API_KEY" for name
// "API_KEY"), also the value of the environment variable of that name.
func NetworkDescription(pol *egress.Policy) string {
	d := "Network access: HTTP and HTTPS requests can reach only these domains, through the proxy that HTTP_PROXY and HTTPS_PROXY name " +
		"(urllib, requests, pip and curl use it): " + strings.Join(pol.AllowedDomains, ", ") + ". " +
		"Anything else (other domains or their subdomains, IP addresses, raw sockets, DNS) is refused, and so is a redirect off the list. " +
		"pip install works when its package index is one of these domains. "
	if len(pol.Secrets) > 0 {
		var parts []string
		for _, s := range pol.Secrets {
			parts = append(parts, "$"+s.Name+" (for "+s.Domain+")")
		}
		d += "Credentials: write these placeholders literally in a request header, e.g. \"Authorization: Bearer $NAME\"; the proxy replaces each with the real secret only on requests to its domain, and the code never sees the secret (the environment variable of the same name holds the placeholder): " +
			strings.Join(parts, ", ") + ". "
	}
	return d
}
