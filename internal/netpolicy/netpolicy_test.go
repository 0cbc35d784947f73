package netpolicy_test

import (
	"strings"
	"testing"

	"github.com/tidwall/gjson"

	"github.com/codeinterp/codeinterp/internal/egress"
	"github.com/codeinterp/codeinterp/internal/netpolicy"
)

func gate(t *testing.T, provider string, domains ...string) netpolicy.Gate {
	t.Helper()
	p, err := egress.New(egress.Config{AllowedDomains: domains, MaxDomains: 3}, nil, nil)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = p.Close() })
	return netpolicy.Gate{Provider: provider, Checker: p}
}

func TestParse(t *testing.T) {
	on := gate(t, "gvisor", "pypi.org", "files.pythonhosted.org", "api.example.com", "a.example.com")
	off := gate(t, "gvisor")
	wasm := gate(t, "wasm", "pypi.org")
	big := strings.Repeat("x", netpolicy.MaxSecretValueBytes+1)
	const p = "tools[0].container.network_policy"
	cases := []struct {
		name  string
		gate  netpolicy.Gate
		json  string
		param string // "" = accepted
		msg   string
		want  *egress.Policy
	}{
		{"absent is sealed", on, ``, "", "", nil},
		{"null is sealed", on, `null`, "", "", nil},
		{"disabled is sealed", on, `{"type":"disabled"}`, "", "", nil},
		{"disabled on wasm is fine", wasm, `{"type":"disabled"}`, "", "", nil},
		{"allowlist", on, `{"type":"allowlist","allowed_domains":["pypi.org","files.pythonhosted.org"]}`, "", "",
			&egress.Policy{AllowedDomains: []string{"pypi.org", "files.pythonhosted.org"}}},
		{"allowlist with a secret", on, `{"type":"allowlist","allowed_domains":["api.example.com"],"domain_secrets":[{"domain":"api.example.com","name":"API_KEY","value":"v"}]}`, "", "",
			&egress.Policy{AllowedDomains: []string{"api.example.com"}, Secrets: []egress.Secret{{Domain: "api.example.com", Name: "API_KEY", Value: "v"}}}},
		{"wasm has no sockets", wasm, `{"type":"allowlist","allowed_domains":["pypi.org"]}`, p, "wasm sandbox, which has no sockets", nil},
		{"wasm names the config key", wasm, `{"type":"allowlist","allowed_domains":["pypi.org"]}`, p, "sandbox.network.allowed_domains", nil},
		{"feature off", off, `{"type":"allowlist","allowed_domains":["pypi.org"]}`, p, "turned off", nil},
		{"no checker", netpolicy.Gate{Provider: "gvisor"}, `{"type":"allowlist","allowed_domains":["pypi.org"]}`, p, "turned off", nil},
		{"not an object", on, `"allowlist"`, p, "expected an object", nil},
		{"no type", on, `{"allowed_domains":["pypi.org"]}`, p + ".type", "Missing required parameter", nil},
		{"unknown type", on, `{"type":"open"}`, p + ".type", "'disabled' or 'allowlist'", nil},
		{"disabled with domains", on, `{"type":"disabled","allowed_domains":["pypi.org"]}`, p + ".allowed_domains", "Unknown parameter", nil},
		{"unknown key", on, `{"type":"allowlist","allowed_domains":["pypi.org"],"ports":[443]}`, p + ".ports", "Unknown parameter", nil},
		{"allowed_domains missing", on, `{"type":"allowlist"}`, p + ".allowed_domains", "Missing required parameter", nil},
		{"allowed_domains empty", on, `{"type":"allowlist","allowed_domains":[]}`, p + ".allowed_domains", "minimum length 1", nil},
		{"allowed_domains not an array", on, `{"type":"allowlist","allowed_domains":"pypi.org"}`, p + ".allowed_domains", "expected an array", nil},
		{"a domain not a string", on, `{"type":"allowlist","allowed_domains":["pypi.org",7]}`, p + ".allowed_domains[1]", "expected a string", nil},
		{"an empty domain", on, `{"type":"allowlist","allowed_domains":["pypi.org",""]}`, p + ".allowed_domains[1]", "empty string", nil},
		{"a domain off the operator's list", on, `{"type":"allowlist","allowed_domains":["pypi.org","evil.test"]}`, p + ".allowed_domains[1]", "not in this server's list", nil},
		{"the subdomain trick", on, `{"type":"allowlist","allowed_domains":["pypi.org.evil.test"]}`, p + ".allowed_domains[0]", "not in this server's list", nil},
		{"an IP literal", on, `{"type":"allowlist","allowed_domains":["pypi.org","10.0.0.1"]}`, p + ".allowed_domains[1]", "IP address", nil},
		{"a URL", on, `{"type":"allowlist","allowed_domains":["https://pypi.org"]}`, p + ".allowed_domains[0]", "scheme", nil},
		{"above max_domains", on, `{"type":"allowlist","allowed_domains":["pypi.org","files.pythonhosted.org","api.example.com","a.example.com"]}`, p + ".allowed_domains", "at most 3", nil},
		{"domain_secrets empty", on, `{"type":"allowlist","allowed_domains":["pypi.org"],"domain_secrets":[]}`, p + ".domain_secrets", "minimum length 1", nil},
		{"a secret without value", on, `{"type":"allowlist","allowed_domains":["pypi.org"],"domain_secrets":[{"domain":"pypi.org","name":"K"}]}`, p + ".domain_secrets[0].value", "Missing required parameter", nil},
		{"a secret without name", on, `{"type":"allowlist","allowed_domains":["pypi.org"],"domain_secrets":[{"domain":"pypi.org","value":"v"}]}`, p + ".domain_secrets[0].name", "Missing required parameter", nil},
		{"a secret with an empty domain", on, `{"type":"allowlist","allowed_domains":["pypi.org"],"domain_secrets":[{"domain":"","name":"K","value":"v"}]}`, p + ".domain_secrets[0].domain", "empty string", nil},
		{"a secret's unknown key", on, `{"type":"allowlist","allowed_domains":["pypi.org"],"domain_secrets":[{"domain":"pypi.org","name":"K","value":"v","ttl":1}]}`, p + ".domain_secrets[0].ttl", "Unknown parameter", nil},
		{"a secret over 10 MiB", on, `{"type":"allowlist","allowed_domains":["pypi.org"],"domain_secrets":[{"domain":"pypi.org","name":"K","value":"` + big + `"}]}`, p + ".domain_secrets[0].value", "maximum length 10485760", nil},
		{"a secret for a domain not in the policy", on, `{"type":"allowlist","allowed_domains":["pypi.org"],"domain_secrets":[{"domain":"api.example.com","name":"K","value":"v"}]}`, p + ".domain_secrets[0].domain", "not in this policy's allowed_domains", nil},
		{"a second secret's bad name", on, `{"type":"allowlist","allowed_domains":["pypi.org"],"domain_secrets":[{"domain":"pypi.org","name":"K","value":"v"},{"domain":"pypi.org","name":"BAD NAME","value":"v"}]}`, p + ".domain_secrets[1].name", "identifier", nil},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			v := gjson.Parse(c.json)
			if c.json == "" {
				v = gjson.Result{}
			}
			pol, e := c.gate.Parse(v, p)
			if c.param == "" {
				if e != nil {
					t.Fatalf("refused: %v", e)
				}
				if (pol == nil) != (c.want == nil) || pol != nil && (strings.Join(pol.AllowedDomains, ",") != strings.Join(c.want.AllowedDomains, ",") || len(pol.Secrets) != len(c.want.Secrets)) {
					t.Fatalf("policy %+v, want %+v", pol, c.want)
				}
				if c.want == nil {
					return
				}
				for i := range c.want.Secrets {
					if pol.Secrets[i] != c.want.Secrets[i] {
						t.Errorf("secret %d: %+v, want %+v", i, pol.Secrets[i], c.want.Secrets[i])
					}
				}
				return
			}
			if e == nil {
				t.Fatalf("accepted %+v, want a 400 at %s", pol, c.param)
			}
			if e.Status != 400 || e.Param != c.param || !strings.Contains(e.Message, c.msg) || e.Type != "invalid_request_error" {
				t.Errorf("got %d %q %q (%s), want 400 at %q containing %q", e.Status, e.Param, e.Message, e.Type, c.param, c.msg)
			}
			if strings.Contains(e.Message, "xxxxxxxx") || strings.Contains(string(e.Body()), `"v"`) {
				t.Errorf("the error quotes a secret's value: %s", e.Body())
			}
		})
	}
}

func TestRedactTools(t *testing.T) {
	tools := `[{"type":"function","name":"f","parameters":{"value":"keep"}},` +
		`{"type":"code_interpreter","container":{"type":"auto","network_policy":{"type":"allowlist","allowed_domains":["a.example.com"],` +
		`"domain_secrets":[{"domain":"a.example.com","name":"A","value":"s3cret-one"},{"domain":"a.example.com","name":"B","value":"s3cret-two"}]}}}]`
	got := netpolicy.RedactTools(tools)
	if strings.Contains(got, "s3cret") {
		t.Fatalf("a value survived: %s", got)
	}
	for _, want := range []string{`"name":"A"`, `"name":"B"`, `"value":"` + netpolicy.Mask + `"`, `"value":"keep"`, `"allowed_domains":["a.example.com"]`} {
		if !strings.Contains(got, want) {
			t.Errorf("%s lacks %s", got, want)
		}
	}
	if n := strings.Count(got, netpolicy.Mask); n != 2 {
		t.Errorf("%d masks, want 2: %s", n, got)
	}
	if !gjson.Valid(got) {
		t.Errorf("not JSON: %s", got)
	}
}
