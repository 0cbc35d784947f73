package interceptor

import (
	"github.com/codeinterp/codeinterp/internal/telemetry"

	"errors"
	"fmt"
	"strings"

	"go.uber.org/zap"

	"github.com/codeinterp/codeinterp/internal/egress"
	"github.com/codeinterp/codeinterp/internal/jsonx"
	"github.com/codeinterp/codeinterp/internal/netpolicy"
	"github.com/codeinterp/codeinterp/internal/sandbox"
)

// toolDescription tells the model what the function gives it, from what
// the running provider reports: it mirrors what OpenAI's hosted tool offers,
// minus what this sandbox lacks.
//
// With a network policy (pol non-nil) it names the domains the code may
// reach and the placeholders of the domain secrets it may put in headers;
// without one it says there is no network.
func toolDescription(env sandbox.Environment, pol *egress.Policy) string {
	version := env.PythonVersion
	if version == "" {
		version = "3"
	}
	d := "Runs Python " + version + " code in a sandboxed interpreter and returns its stdout, stderr and a status line. "
	switch {
	case pol != nil && len(env.Packages) == 0:
		d += "Only the Python standard library is available until you install more. " + networkDescription(pol)
	case pol != nil:
		d += "Besides the standard library these packages can be imported: " + strings.Join(env.Packages, ", ") + ". " + networkDescription(pol)
	case len(env.Packages) == 0:
		d += "Only the Python standard library is available (no third-party packages such as numpy or pandas) and there is no network access. "
	default:
		d += "Besides the standard library these packages can be imported: " + strings.Join(env.Packages, ", ") + ". " +
			"Nothing else can be installed and there is no network access. "
	}
	d += "Print what you need to see: only printed output is returned, not the value of the last expression. " +
		"Variables, imports and files persist between calls within this response. "
	if env.Images {
		d += "Files are in /mnt/data (/tmp for scratch); they are discarded afterwards. " +
			"Matplotlib figures still open when a call ends (plt.show() included) are shown to the user as images."
	} else {
		d += "Use /mnt/data (or /tmp) for scratch files; they are discarded afterwards."
	}
	return d
}

// networkDescription tells the model what a network policy lets its code
// reach. The placeholders are the egress proxy's: "$" + the secret's name
// (OpenAI's documented form, "$API_KEY" for name "API_KEY"), also the
// value of the environment variable of that name.
func networkDescription(pol *egress.Policy) string {
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

// functionTool is the rewritten tool, rendered once per Interceptor (and
// per request with a network policy).
type functionTool struct {
	json string
}

// newFunctionTool renders the tool for the provider's environment and a
// request's network policy (nil: none).
func newFunctionTool(name string, env sandbox.Environment, pol *egress.Policy) functionTool {
	version := env.PythonVersion
	if version == "" {
		version = "3"
	}
	params := `{"type":"object","properties":{"code":{"type":"string","description":` +
		jsonx.Quote("The Python "+version+" source code to run.") +
		`}},"required":["code"],"additionalProperties":false}`
	return functionTool{json: string(jsonx.AppendEditedObject(nil, `{}`,
		jsonx.Set("type", `"function"`),
		jsonx.Set("name", jsonx.Quote(name)),
		jsonx.Set("description", jsonx.Quote(toolDescription(env, pol))),
		jsonx.Set("parameters", params),
		jsonx.Set("strict", "true"),
	))}
}

// New validates cfg (after WithDefaults) and builds an Interceptor. log may
// be nil (no logging).
func New(cfg Config, provider sandbox.Provider, log *zap.Logger, opts ...Option) (*Interceptor, error) {
	cfg = cfg.WithDefaults()
	if err := cfg.Validate(); err != nil {
		return nil, fmt.Errorf("interceptor: invalid config: %w", err)
	}
	if provider == nil {
		return nil, errors.New("interceptor: nil sandbox provider")
	}
	if log == nil {
		log = zap.NewNop()
	}
	env := provider.Environment()
	i := &Interceptor{cfg: cfg, provider: provider, log: log, fn: newFunctionTool(cfg.FunctionName, env, nil),
		network: netpolicy.Gate{Provider: env.Provider}}
	for _, o := range opts {
		o(i)
	}
	if i.tel == nil {
		i.tel = telemetry.Off()
	}
	i.tracer = i.tel.Tracer("interceptor")
	return i, nil
}
