package egress

import (
	"errors"
	"strings"
	"testing"
)

func TestCheck(t *testing.T) {
	p, err := New(Config{AllowedDomains: []string{"pypi.org", "files.pythonhosted.org", "Api.Example.COM."}, MaxDomains: 3}, nil, nil)
	if err != nil {
		t.Fatal(err)
	}
	long := strings.Repeat("v", MaxSecretValue)
	for _, tc := range []struct {
		name  string
		pol   Policy
		param string // "" = accepted
		msg   string
	}{
		{"ok", Policy{AllowedDomains: []string{"pypi.org"}}, "", ""},
		{"case and trailing dot", Policy{AllowedDomains: []string{"PyPI.org.", "api.example.com"}}, "", ""},
		{"secret of max length", Policy{AllowedDomains: []string{"pypi.org"}, Secrets: []Secret{{Domain: "pypi.org", Name: "TOKEN", Value: long}}}, "", ""},
		{"empty list", Policy{}, "allowed_domains", "at least one"},
		{"too many", Policy{AllowedDomains: []string{"pypi.org", "pypi.org", "pypi.org", "pypi.org"}}, "allowed_domains", "at most 3"},
		{"off the operator's list", Policy{AllowedDomains: []string{"pypi.org", "evil.test"}}, "allowed_domains[1]", "not in this server's list"},
		{"subdomain not implied", Policy{AllowedDomains: []string{"www.pypi.org"}}, "allowed_domains[0]", "not in this server's list"},
		{"scheme", Policy{AllowedDomains: []string{"https://pypi.org"}}, "allowed_domains[0]", "scheme"},
		{"path", Policy{AllowedDomains: []string{"pypi.org/simple"}}, "allowed_domains[0]", "path"},
		{"port", Policy{AllowedDomains: []string{"pypi.org:443"}}, "allowed_domains[0]", "port"},
		{"wildcard", Policy{AllowedDomains: []string{"*.pypi.org"}}, "allowed_domains[0]", "wildcard"},
		{"ipv4", Policy{AllowedDomains: []string{"pypi.org", "127.0.0.1"}}, "allowed_domains[1]", "IP address"},
		{"ipv6", Policy{AllowedDomains: []string{"[::1]"}}, "allowed_domains[0]", "IP address"},
		{"decimal ip", Policy{AllowedDomains: []string{"2130706433"}}, "allowed_domains[0]", "IP address"},
		{"blank", Policy{AllowedDomains: []string{" "}}, "allowed_domains[0]", "non-empty"},
		{"secret domain not in policy", Policy{AllowedDomains: []string{"pypi.org"}, Secrets: []Secret{{Domain: "files.pythonhosted.org", Name: "K", Value: "v"}}}, "domain_secrets[0].domain", "not in this policy"},
		{"secret name empty", Policy{AllowedDomains: []string{"pypi.org"}, Secrets: []Secret{{Domain: "pypi.org", Name: "", Value: "v"}}}, "domain_secrets[0].name", "non-empty"},
		{"secret name not an identifier", Policy{AllowedDomains: []string{"pypi.org"}, Secrets: []Secret{{Domain: "pypi.org", Name: "API-KEY", Value: "v"}}}, "domain_secrets[0].name", "identifier"},
		{"secret name starts with digit", Policy{AllowedDomains: []string{"pypi.org"}, Secrets: []Secret{{Domain: "pypi.org", Name: "1KEY", Value: "v"}}}, "domain_secrets[0].name", "identifier"},
		{"duplicate names", Policy{AllowedDomains: []string{"pypi.org", "api.example.com"}, Secrets: []Secret{{Domain: "pypi.org", Name: "K", Value: "a"}, {Domain: "api.example.com", Name: "K", Value: "b"}}}, "domain_secrets[1].name", "unique"},
		{"empty value", Policy{AllowedDomains: []string{"pypi.org"}, Secrets: []Secret{{Domain: "pypi.org", Name: "K", Value: ""}}}, "domain_secrets[0].value", "non-empty"},
		{"value too long", Policy{AllowedDomains: []string{"pypi.org"}, Secrets: []Secret{{Domain: "pypi.org", Name: "K", Value: long + "v"}}}, "domain_secrets[0].value", "at most"},
		{"value with newline", Policy{AllowedDomains: []string{"pypi.org"}, Secrets: []Secret{{Domain: "pypi.org", Name: "K", Value: "abc\r\nX-Injected: 1"}}}, "domain_secrets[0].value", "control characters"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			orig := append([]string(nil), tc.pol.AllowedDomains...)
			err := p.Check(tc.pol)
			for i := range orig {
				if tc.pol.AllowedDomains[i] != orig[i] {
					t.Errorf("Check changed the policy in place")
				}
			}
			if tc.param == "" {
				if err != nil {
					t.Fatalf("refused: %v", err)
				}
				return
			}
			var pe *PolicyError
			if !errors.As(err, &pe) {
				t.Fatalf("got %v, want a *PolicyError", err)
			}
			if pe.Param != tc.param || !strings.Contains(pe.Message, tc.msg) {
				t.Errorf("got %q %q, want %q containing %q", pe.Param, pe.Message, tc.param, tc.msg)
			}
			for _, s := range tc.pol.Secrets {
				if len(s.Value) > 3 && strings.Contains(err.Error(), s.Value) {
					t.Errorf("the error holds the secret's value: %q", err)
				}
			}
		})
	}
}

func TestNewRefusesABadBound(t *testing.T) {
	for _, cfg := range []Config{
		{AllowedDomains: []string{"https://pypi.org"}},
		{AllowedDomains: []string{"10.0.0.1"}},
		{AllowedDomains: []string{"pypi.org"}, Resolve: map[string]string{"*.x": "127.0.0.1:1"}},
		{AllowedDomains: []string{"pypi.org"}, Resolve: map[string]string{"pypi.org": ""}},
	} {
		if _, err := New(cfg, nil, nil); err == nil {
			t.Errorf("New(%+v) accepted", cfg)
		}
	}
	p, err := New(Config{}, nil, nil)
	if err != nil || p.Enabled() {
		t.Errorf("an empty list: %v, enabled %v; want off", err, p.Enabled())
	}
}

func TestIPLiteralForms(t *testing.T) {
	for _, h := range []string{"127.0.0.1", "::1", "[::1]", "[fe80::1%eth0]", "2130706433", "0x7f000001", "017700000001",
		"127.1", "0x7f.1", "0x7f.0.0.1", "0", "0x", "1.2.3.4.", "::ffff:127.0.0.1", "a.b.123"} {
		if !isIPLiteral(h) {
			t.Errorf("%q not seen as an IP literal", h)
		}
	}
	for _, h := range []string{"pypi.org", "0x7f.test", "123.test", "a1", "x0x1", "allowed.test"} {
		if isIPLiteral(h) {
			t.Errorf("%q seen as an IP literal", h)
		}
	}
}
