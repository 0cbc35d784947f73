package interceptor

import (
	"strings"
	"testing"

	"github.com/tidwall/gjson"

	"github.com/codeinterp/codeinterp/internal/apierror"
	"github.com/codeinterp/codeinterp/internal/egress"
	"github.com/codeinterp/codeinterp/internal/netpolicy"
	"github.com/codeinterp/codeinterp/internal/sandbox"
)

// gvisorProvider is untouchedProvider with the environment of a gVisor
// pool that has an egress proxy.
type gvisorProvider struct{ untouchedProvider }

func (gvisorProvider) Environment() sandbox.Environment {
	return sandbox.Environment{Provider: "gvisor", PythonVersion: "3.11", Packages: []string{"numpy"}, Images: true, Network: true}
}

func netRewriter(t *testing.T, on bool) *Interceptor {
	t.Helper()
	var opts []Option
	if on {
		p, err := egress.New(egress.Config{AllowedDomains: []string{"pypi.org", "api.example.com"}}, nil, nil)
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { _ = p.Close() })
		opts = append(opts, WithNetwork(p))
	}
	ic, err := New(DefaultConfig(), gvisorProvider{untouchedProvider{t}}, nil, opts...)
	if err != nil {
		t.Fatal(err)
	}
	return ic
}

const netBody = `{"model":"m","input":"hi","tools":[{"type":"function","name":"other","parameters":{}},{"type":"code_interpreter","container":{"type":"auto",
"network_policy":{"type":"allowlist","allowed_domains":["pypi.org","api.example.com"],"domain_secrets":[{"domain":"api.example.com","name":"API_KEY","value":"the-value-31a"}]}}}]}`

// TestRewriteNetworkPolicy: an allowlist on a gVisor server with the
// feature on reaches the session (with its secret), the model is told the
// domains and the placeholder and never gets the value, and the tools the
// response will echo have it masked.
func TestRewriteNetworkPolicy(t *testing.T) {
	x, err := netRewriter(t, true).RewriteRequest([]byte(netBody))
	if err != nil {
		t.Fatal(err)
	}
	pol := x.req.network
	if pol == nil || len(pol.Secrets) != 1 || pol.Secrets[0].Value != "the-value-31a" {
		t.Fatalf("the session's policy is %+v", pol)
	}
	up := string(x.UpstreamBody())
	if strings.Contains(up, "the-value-31a") || strings.Contains(up, "network_policy") {
		t.Errorf("the upstream body carries the policy: %s", up)
	}
	d := gjson.Get(up, "tools.1.description").Str
	for _, want := range []string{"pypi.org, api.example.com", "$API_KEY (for api.example.com)", "HTTPS_PROXY", "pip install"} {
		if !strings.Contains(d, want) {
			t.Errorf("description %q lacks %q", d, want)
		}
	}
	if strings.Contains(d, "no network access") {
		t.Errorf("description says there is no network: %q", d)
	}
	if strings.Contains(x.req.clientTools, "the-value-31a") || gjson.Get(x.req.clientTools, "1.container.network_policy.domain_secrets.0.value").Str != netpolicy.Mask {
		t.Errorf("the echoed tools: %s", x.req.clientTools)
	}
	// Without a policy the same server tells the model there is none.
	x, err = netRewriter(t, true).RewriteRequest([]byte(`{"model":"m","input":"hi","tools":[{"type":"code_interpreter","container":{"type":"auto"}}]}`))
	if err != nil {
		t.Fatal(err)
	}
	if d := gjson.GetBytes(x.UpstreamBody(), "tools.0.description").Str; !strings.Contains(d, "no network access") || x.req.network != nil {
		t.Errorf("sealed: description %q, policy %+v", d, x.req.network)
	}
}

func TestRewriteNetworkPolicyRefused(t *testing.T) {
	cases := []struct {
		name  string
		ic    *Interceptor
		body  string
		param string
		msg   string
	}{
		{"feature off", netRewriter(t, false), netBody, "tools[1].container.network_policy", "turned off"},
		{"wasm", newRewriter(t, nil), netBody, "tools[1].container.network_policy", "no sockets"},
		{"off the operator's list", netRewriter(t, true), strings.Replace(netBody, `"api.example.com"],`, `"evil.test"],`, 1),
			"tools[1].container.network_policy.allowed_domains[1]", "not in this server's list"},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			_, err := c.ic.RewriteRequest([]byte(c.body))
			e, ok := err.(*apierror.Error)
			if !ok || e.Status != 400 || e.Param != c.param || !strings.Contains(e.Message, c.msg) {
				t.Fatalf("got %v, want a 400 at %s containing %q", err, c.param, c.msg)
			}
			if strings.Contains(string(e.Body()), "the-value-31a") {
				t.Errorf("the error quotes the secret: %s", e.Body())
			}
		})
	}
}
