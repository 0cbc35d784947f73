package gvisor_test

import (
	"context"
	"fmt"
	"strings"
	"testing"
	"time"

	"go.uber.org/zap/zaptest"

	"github.com/codeinterp/codeinterp/egress"
	"github.com/codeinterp/codeinterp/internal/egresstest"
	"github.com/codeinterp/codeinterp/sandbox/gvisor"
	"github.com/codeinterp/codeinterp/sandbox/internal/wire"
	"github.com/codeinterp/codeinterp/sandbox/pool"
)

// secretValue is the domain secret the proxy holds; code in the sandbox
// must never find it.
const secretValue = "s3cr3t-value-7f1c9e"

// netEnv is a kind whose sandboxes trust the test CA, an egress proxy
// whose resolver maps the test domains to the origins, and the origins.
type netEnv struct {
	*env
	origins *egresstest.Origins
	proxy   *egress.Proxy
}

func newNetEnv(t *testing.T, cold bool, mutate ...func(*egress.Config)) *netEnv {
	t.Helper()
	o := egresstest.Start(t)
	cfg := egress.Config{
		AllowedDomains: []string{egresstest.AllowedDomain, egresstest.SecretDomain, egresstest.IndexDomain,
			egresstest.RedirectDomain, egresstest.PlainDomain},
		Resolve: o.Resolve(), RootCAs: o.CAPool, MaxConns: 64,
	}
	for _, m := range mutate {
		m(&cfg)
	}
	p, err := egress.New(cfg, zaptest.NewLogger(t), nil)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = p.Close() })
	e := newEnv(t, func(c *gvisor.Config) {
		c.ColdStart = cold
		c.ExtraCAPEM = o.CAPEM
	})
	return &netEnv{env: e, origins: o, proxy: p}
}

// policy is the sessions' allowlist: everything the operator allows, and
// a secret for SecretDomain.
func policy() egress.Policy {
	return egress.Policy{
		AllowedDomains: []string{egresstest.AllowedDomain, egresstest.SecretDomain, egresstest.IndexDomain,
			egresstest.RedirectDomain, egresstest.PlainDomain},
		Secrets: []egress.Secret{{Domain: egresstest.SecretDomain, Name: "API_KEY", Value: secretValue}},
	}
}

// startNet starts a sandbox served by a new egress session for pol.
func (e *netEnv) startNet(t *testing.T, pol egress.Policy) (*sandbox, *egress.Session) {
	t.Helper()
	es, err := e.proxy.Open(context.Background(), pol)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = es.Close() })
	return e.start(t, func(o *pool.StartOptions) { o.Egress = es }), es
}

// fetch is code that GETs url with urllib (headers: a dict literal) and
// prints "STATUS <code> <first line>" or "ERROR <reason>".
func fetch(url, headers string) string {
	if headers == "" {
		headers = "{}"
	}
	return fmt.Sprintf(`
import urllib.request, urllib.error
try:
    with urllib.request.urlopen(urllib.request.Request(%q, headers=%s), timeout=15) as r:
        print("STATUS", r.status, r.read().decode().strip())
except urllib.error.HTTPError as e:
    print("ERROR http", e.code, e.read().decode(errors="replace").strip()[:200])
except Exception as e:
    print("ERROR", type(e).__name__, e)
`, url, headers)
}

func TestNetworkSmoke(t *testing.T) {
	for _, m := range modes {
		t.Run(m.name, func(t *testing.T) {
			e := newNetEnv(t, m.cold)
			s, _ := e.startNet(t, policy())
			r := s.run(fetch("https://"+egresstest.AllowedDomain+"/hello", ""), 30*time.Second)
			t.Logf("%s", describe(r))
			if r.Status != wire.StatusOK || !strings.Contains(string(r.Stdout), "STATUS 200 hello from allowed.test") {
				t.Fatalf("allowed fetch: %s", describe(r))
			}
		})
	}
}
