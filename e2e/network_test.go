package e2e

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"net/http"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	goredis "github.com/redis/go-redis/v9"
	"github.com/tidwall/gjson"
	"go.uber.org/zap"
	"go.uber.org/zap/zapcore"
	"go.uber.org/zap/zaptest"

	"github.com/codeinterp/codeinterp/internal/egress"
	"github.com/codeinterp/codeinterp/internal/egresstest"
	"github.com/codeinterp/codeinterp/internal/netpolicy"
	"github.com/codeinterp/codeinterp/internal/sandbox/gvisor"
	"github.com/codeinterp/codeinterp/internal/sandbox/pool"
	"github.com/codeinterp/codeinterp/internal/store"
	redisstore "github.com/codeinterp/codeinterp/internal/store/redis"
	"github.com/codeinterp/codeinterp/internal/store/redis/redistest"
)

// netSecret is the domain secret of these tests: it must reach
// SecretDomain's origin and nothing else the server writes.
const netSecret = "e2e-s3cr3t-4b9d"

// lockedBuffer collects the stack's logs.
type lockedBuffer struct {
	mu sync.Mutex
	b  bytes.Buffer
}

func (l *lockedBuffer) Write(p []byte) (int, error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.b.Write(p)
}

func (l *lockedBuffer) String() string {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.b.String()
}

// netStackMetrics is a gVisor stack with containers whose sessions
// reach the test's origins through a real egress proxy, whose metrics are
// on the registry it returns.
func netStackMetrics(t *testing.T, s script) (*stack, *egresstest.Origins, *lockedBuffer, *prometheus.Registry) {
	return netStackWith(t, s, nil)
}

// netStackWith is netStackMetrics over st (nil: a memory store).
func netStackWith(t *testing.T, s script, st store.Store) (*stack, *egresstest.Origins, *lockedBuffer, *prometheus.Registry) {
	t.Helper()
	o := egresstest.Start(t)
	logs := &lockedBuffer{}
	reg := prometheus.NewRegistry()
	// The proxy logs where the rest of the stack does: into logs too.
	plog := zap.New(zapcore.NewTee(zaptest.NewLogger(t).Core(),
		zapcore.NewCore(zapcore.NewJSONEncoder(zap.NewProductionEncoderConfig()), zapcore.AddSync(logs), zapcore.DebugLevel)))
	p, err := egress.New(egress.Config{
		AllowedDomains: []string{egresstest.AllowedDomain, egresstest.SecretDomain},
		Resolve:        o.Resolve(), RootCAs: o.CAPool,
	}, plog, reg)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = p.Close() })
	used := &egressUsage{bytes: map[string]int64{}}
	stk := newStack(t, loadShapes(t), s, stackOptions{
		provider: "gvisor", containers: true, egress: p, logs: logs, st: st,
		kind: func(c *gvisor.Config) { c.ExtraCAPEM = o.CAPEM },
		pool: []func(*pool.Config){func(c *pool.Config) { c.EgressUsed = used.add }},
	})
	stk.egressUsed = used
	return stk, o, logs, reg
}

// egressUsage records the egress bytes the pool accounts to each owner.
type egressUsage struct {
	mu    sync.Mutex
	bytes map[string]int64
}

func (u *egressUsage) add(owner string, n int64) {
	u.mu.Lock()
	defer u.mu.Unlock()
	u.bytes[owner] += n
}

func (u *egressUsage) of(owner string) int64 {
	u.mu.Lock()
	defer u.mu.Unlock()
	return u.bytes[owner]
}

// netCode fetches an allowed domain, the secret's domain with the
// placeholder, and a domain off the list, and prints the placeholder.
const netCode = `import os, urllib.request
for url, h in [("https://allowed.test/hello", {}), ("https://secret.test/hello", {"Authorization": "Bearer $API_KEY"}), ("https://evil.test/hello", {})]:
    try:
        print(urllib.request.urlopen(urllib.request.Request(url, headers=h), timeout=15).read().decode().strip())
    except Exception as e:
        print("refused:", e)
print("env", os.environ.get("API_KEY"))`

// oneCall is the model: run netCode, then answer with its output.
func oneCall(m **model, code string) script {
	return func(t testing.TB, c *convo) reply {
		if len(c.outputs()) == 0 {
			return reply{items: []string{(*m).call(code)}}
		}
		return reply{items: []string{(*m).message("done: " + lastOutputs(c)[0].Get("output").Str)}}
	}
}

func wantNetOutput(t *testing.T, logs string) {
	t.Helper()
	for _, want := range []string{"hello from allowed.test", "hello from secret.test", "refused:", "403", "env $API_KEY"} {
		if !strings.Contains(logs, want) {
			t.Errorf("the run's output %q lacks %q", logs, want)
		}
	}
}

// wantNoSecret fails when what holds s carries the secret.
func wantNoSecret(t *testing.T, what, s string) {
	t.Helper()
	if strings.Contains(s, netSecret) {
		t.Errorf("%s holds the domain secret: %.400q", what, s)
	}
}

// TestNetworkPolicyResponse: a whole /v1/responses request with an
// allowlist and a domain secret, through the dev proxy and a scripted
// model: the code reaches the allowed domains (the secret only its own),
// the model is told the domains and the placeholder, the response's tools
// echo the secret masked, and neither the response, the stored response,
// the containers' store, the model's requests nor the logs hold the value.
func TestNetworkPolicyResponse(t *testing.T) {
	var m *model
	s, o, logs, reg := netStackMetrics(t, oneCall(&m, netCode))
	m = s.model
	body := fmt.Sprintf(`{"model":"gpt-4.1","input":"fetch the pages","include":["code_interpreter_call.outputs"],
"tools":[{"type":"code_interpreter","container":{"type":"auto","network_policy":{"type":"allowlist",
"allowed_domains":["allowed.test","secret.test"],"domain_secrets":[{"domain":"secret.test","name":"API_KEY","value":%q}]}}}]}`, netSecret)
	resp, got := rawPost(t, s.proxyURL, body, map[string]string{"Authorization": "Bearer " + apiKey, "Content-Type": "application/json"})
	if resp.StatusCode != http.StatusOK {
		t.Fatalf("HTTP %d: %s", resp.StatusCode, got)
	}
	r := gjson.ParseBytes(got)
	var ci gjson.Result
	for _, it := range r.Get("output").Array() {
		if it.Get("type").Str == "code_interpreter_call" {
			ci = it
		}
	}
	wantNetOutput(t, ci.Get("outputs.0.logs").Str)
	if a := o.Authorization(egresstest.SecretDomain); len(a) != 1 || a[0] != "Bearer "+netSecret {
		t.Errorf("secret.test got %q, want the secret", a)
	}
	if o.Hits(egresstest.EvilDomain) != 0 {
		t.Error("evil.test was reached")
	}
	np := r.Get("tools.0.container.network_policy")
	if np.Get("domain_secrets.0.value").Str != netpolicy.Mask || np.Get("domain_secrets.0.name").Str != "API_KEY" || np.Get("allowed_domains.1").Str != "secret.test" {
		t.Errorf("tools echo %s, want the policy with the value masked", np.Raw)
	}
	wantNoSecret(t, "the response", string(got))
	for i, mr := range m.all() {
		wantNoSecret(t, fmt.Sprintf("model request %d", i), string(mr.body))
		if i == 0 {
			d := gjson.GetBytes(mr.body, "tools.0.description").Str
			for _, want := range []string{"allowed.test", "secret.test", "$API_KEY", "HTTPS_PROXY"} {
				if !strings.Contains(d, want) {
					t.Errorf("the tool's description %q does not name %q", d, want)
				}
			}
		}
	}
	stored, sb := get(t, s.proxyURL+"/v1/responses/"+r.Get("id").Str)
	if stored != http.StatusOK || !strings.Contains(sb, netpolicy.Mask) {
		t.Errorf("stored response: HTTP %d %.300s", stored, sb)
	}
	wantNoSecret(t, "the stored response", sb)
	wantNoSecret(t, "the containers' store", dumpContainers(t, s.st))
	wantNoSecret(t, "the logs", logs.String())
	mfs, err := reg.Gather()
	if err != nil {
		t.Fatal(err)
	}
	metrics := fmt.Sprint(mfs)
	wantNoSecret(t, "the metrics", metrics)
	if !strings.Contains(metrics, "codeinterp_egress_connections_total") || !strings.Contains(metrics, "refused") {
		t.Errorf("the egress metrics counted nothing: %.300s", metrics)
	}
	if !strings.Contains(logs.String(), "egress allowed") || !strings.Contains(logs.String(), "interceptor") {
		t.Error("the logs captured nothing of the egress path: the check above proves nothing")
	}
	// When the session closes, what its egress carried is the owner's usage.
	if err := s.manager.Close(); err != nil {
		t.Fatal(err)
	}
	owner, _ := store.Owner(http.Header{"Authorization": {"Bearer " + apiKey}}, store.DefaultAuthHeaders())
	for deadline := time.Now().Add(30 * time.Second); s.egressUsed.of(owner) == 0; time.Sleep(20 * time.Millisecond) {
		if time.Now().After(deadline) {
			t.Fatal("the session's egress bytes were not accounted to its owner")
		}
	}
}

// TestNetworkPolicyContainer: a container made with a policy through POST
// /v1/containers echoes {type, allowed_domains} (never domain_secrets),
// its store record has no value, and a response naming it runs code with
// that policy.
func TestNetworkPolicyContainer(t *testing.T) {
	t.Run("memory", func(t *testing.T) { testNetworkPolicyContainer(t, nil, nil) })
	t.Run("redis", func(t *testing.T) {
		url := redistest.Start(t)
		st, err := redisstore.New(context.Background(), url, store.DefaultLimits(), nil)
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { _ = st.Close() })
		testNetworkPolicyContainer(t, st, func() string { return dumpRedis(t, url) })
	})
}

func testNetworkPolicyContainer(t *testing.T, st store.Store, dump func() string) {
	var m *model
	s, o, logs, _ := netStackWith(t, oneCall(&m, netCode), st)
	m = s.model
	body := fmt.Sprintf(`{"name":"net","network_policy":{"type":"allowlist","allowed_domains":["allowed.test","secret.test"],
"domain_secrets":[{"domain":"secret.test","name":"API_KEY","value":%q}]}}`, netSecret)
	req, _ := http.NewRequest(http.MethodPost, s.proxyURL+"/v1/containers", strings.NewReader(body))
	req.Header.Set("Authorization", "Bearer "+apiKey)
	req.Header.Set("Content-Type", "application/json")
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	var c map[string]json.RawMessage
	_ = json.NewDecoder(resp.Body).Decode(&c)
	resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		t.Fatalf("create: HTTP %d %v", resp.StatusCode, c)
	}
	if got := string(c["network_policy"]); got != `{"type":"allowlist","allowed_domains":["allowed.test","secret.test"]}` {
		t.Errorf("container echoes network_policy %s", got)
	}
	var id string
	_ = json.Unmarshal(c["id"], &id)
	_, gb := get(t, s.proxyURL+"/v1/containers/"+id)
	if !strings.Contains(gb, `"allowed_domains"`) || strings.Contains(gb, "domain_secrets") {
		t.Errorf("GET container: %s", gb)
	}
	wantNoSecret(t, "the container's store record", dumpContainers(t, s.st))
	rbody := fmt.Sprintf(`{"model":"gpt-4.1","input":"fetch","include":["code_interpreter_call.outputs"],"tools":[{"type":"code_interpreter","container":%q}]}`, id)
	resp2, got := rawPost(t, s.proxyURL, rbody, map[string]string{"Authorization": "Bearer " + apiKey, "Content-Type": "application/json"})
	if resp2.StatusCode != http.StatusOK {
		t.Fatalf("HTTP %d: %s", resp2.StatusCode, got)
	}
	var logsOut string
	for _, it := range gjson.GetBytes(got, "output").Array() {
		if it.Get("type").Str == "code_interpreter_call" {
			logsOut = it.Get("outputs.0.logs").Str
		}
	}
	wantNetOutput(t, logsOut)
	if all := m.all(); len(all) == 0 || !strings.Contains(gjson.GetBytes(all[0].body, "tools.0.description").Str, "allowed.test, secret.test") ||
		!strings.Contains(gjson.GetBytes(all[0].body, "tools.0.description").Str, "$API_KEY") {
		t.Errorf("the model was not told the container's domains and placeholder")
	}
	if a := o.Authorization(egresstest.SecretDomain); len(a) != 1 || a[0] != "Bearer "+netSecret {
		t.Errorf("secret.test got %q, want the secret", a)
	}
	wantNoSecret(t, "the response", string(got))
	wantNoSecret(t, "the logs", logs.String())
	if dump != nil {
		all := dump()
		if !strings.Contains(all, "API_KEY") {
			t.Errorf("redis holds no container record with the secret's name: the check proves nothing (%.300s)", all)
		}
		wantNoSecret(t, "redis", all)
	}
}

// dumpRedis is every key and value the redis server at url holds.
func dumpRedis(t *testing.T, url string) string {
	t.Helper()
	opt, err := goredis.ParseURL(url)
	if err != nil {
		t.Fatal(err)
	}
	c := goredis.NewClient(opt)
	defer c.Close()
	ctx := context.Background()
	keys, err := c.Keys(ctx, "*").Result()
	if err != nil {
		t.Fatal(err)
	}
	var b strings.Builder
	for _, k := range keys {
		typ, _ := c.Type(ctx, k).Result()
		var v any
		switch typ {
		case "string":
			v, err = c.Get(ctx, k).Result()
		case "hash":
			v, err = c.HGetAll(ctx, k).Result()
		case "zset":
			v, err = c.ZRangeWithScores(ctx, k, 0, -1).Result()
		case "set":
			v, err = c.SMembers(ctx, k).Result()
		case "list":
			v, err = c.LRange(ctx, k, 0, -1).Result()
		default:
			v = "(" + typ + ")"
		}
		if err != nil {
			t.Fatalf("redis %s %s: %v", typ, k, err)
		}
		fmt.Fprintf(&b, "%s %v\n", k, v)
	}
	return b.String()
}

// TestNetworkPolicyRefused: a wasm server answers an allowlist with a 400
// naming the field and why.
func TestNetworkPolicyRefused(t *testing.T) {
	s := newStack(t, loadShapes(t), func(t testing.TB, c *convo) reply {
		t.Error("the model was asked")
		return reply{}
	}, stackOptions{})
	body := `{"model":"gpt-4.1","input":"x","tools":[{"type":"code_interpreter","container":{"type":"auto","network_policy":{"type":"allowlist","allowed_domains":["pypi.org"]}}}]}`
	resp, got := rawPost(t, s.proxyURL, body, map[string]string{"Authorization": "Bearer " + apiKey, "Content-Type": "application/json"})
	e := gjson.GetBytes(got, "error")
	if resp.StatusCode != http.StatusBadRequest || e.Get("param").Str != "tools[0].container.network_policy" ||
		!strings.Contains(e.Get("message").Str, "no sockets") || !strings.Contains(e.Get("message").Str, "sandbox.provider: gvisor") {
		t.Errorf("HTTP %d %s", resp.StatusCode, got)
	}
}

func get(t *testing.T, url string) (int, string) {
	t.Helper()
	req, _ := http.NewRequest(http.MethodGet, url, nil)
	req.Header.Set("Authorization", "Bearer "+apiKey)
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	var b bytes.Buffer
	_, _ = b.ReadFrom(resp.Body)
	return resp.StatusCode, b.String()
}

// dumpContainers is every container record the store holds, as JSON.
func dumpContainers(t *testing.T, st store.Store) string {
	t.Helper()
	owner, _ := store.Owner(http.Header{"Authorization": {"Bearer " + apiKey}}, store.DefaultAuthHeaders())
	all, _, err := st.ListContainers(t.Context(), owner, store.ListOptions{Limit: 100})
	if err != nil {
		t.Fatal(err)
	}
	if len(all) == 0 {
		t.Fatal("the store holds no container: the check proves nothing")
	}
	b, _ := json.Marshal(all)
	return string(b)
}
