package gvisor_test

import (
	"archive/zip"
	"bytes"
	"context"
	"fmt"
	"io/fs"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"

	"go.uber.org/zap/zaptest"

	"github.com/codeinterp/codeinterp/internal/egress"
	"github.com/codeinterp/codeinterp/internal/egresstest"
	"github.com/codeinterp/codeinterp/internal/sandbox/gvisor"
	"github.com/codeinterp/codeinterp/internal/sandbox/internal/wire"
	"github.com/codeinterp/codeinterp/internal/sandbox/pool"
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

func newNetEnv(t testing.TB, cold bool, mutate ...func(*egress.Config)) *netEnv {
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
func (e *netEnv) startNet(t testing.TB, pol egress.Policy) (*sandbox, *egress.Session) {
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

// verdict is code that prints "VERDICT ok" when body (indented code that
// raises to fail, or prints "VERDICT bad ...") completes.
func verdict(body string) string { return body + "\nprint('VERDICT ok')\n" }

// TestNetwork runs the allowlist's functional and hostile corpus in one
// networked sandbox per start mode: what the policy allows works, the rest
// fails with a clear error from the proxy (or no route at all), and the
// session stays usable throughout.
func TestNetwork(t *testing.T) {
	for _, m := range modes {
		t.Run(m.name, func(t *testing.T) {
			e := newNetEnv(t, m.cold)
			s, _ := e.startNet(t, policy())
			o := e.origins
			https := func(host, path string) string { return "https://" + host + path }
			bearer := `{"Authorization": "Bearer $API_KEY"}`
			cases := []struct {
				name, code, want string
			}{
				{"https to an allowed domain", fetch(https(egresstest.AllowedDomain, "/hello"), ""), "STATUS 200 hello from allowed.test"},
				{"plain http to an allowed domain", fetch("http://"+egresstest.PlainDomain+"/hello", ""), "STATUS 200 hello from plain.test"},
				{"the secret reaches its domain", fetch(https(egresstest.SecretDomain, "/hello"), bearer), "STATUS 200 hello from secret.test"},
				{"the placeholder elsewhere stays a placeholder", fetch(https(egresstest.AllowedDomain, "/hello"), bearer), "STATUS 200"},
				{"IP literal (CONNECT)", fetch(fmt.Sprintf("https://127.0.0.1:%d/hello", o.HTTPSPort()), ""), "403"},
				{"IP literal, decimal (http)", fetch("http://2130706433/hello", ""), "ERROR http 403"},
				{"the subdomain trick", fetch(https(egresstest.SubdomainTrick, "/hello"), ""), "403"},
				{"a domain off the list", fetch(https(egresstest.EvilDomain, "/hello"), ""), "403"},
				{"another port", fetch(https(egresstest.AllowedDomain+":8443", "/hello"), ""), "403"},
				{"a redirect off the list (tunnel: the next CONNECT is refused)", fetch(https(egresstest.RedirectDomain, "/away"), ""), "403"},
				{"a redirect off the list (terminated TLS: the proxy refuses it)", fetch(https(egresstest.SecretDomain, "/away"), ""), "502"},
				{"no proxy: no DNS", `
import urllib.request
try:
    urllib.request.build_opener(urllib.request.ProxyHandler({})).open("https://allowed.test/hello", timeout=5)
    print("VERDICT bad: fetched without the proxy")
except OSError as e:
    print("VERDICT ok", e)`, "VERDICT ok"},
				{"no DNS at all", verdict(`
import socket
try:
    print("VERDICT bad", socket.getaddrinfo("allowed.test", 443))
except socket.gaierror as e:
    print(e)`), "VERDICT ok"},
				{"raw TCP to the host: no route", fmt.Sprintf(`
import socket
for addr in [(%q, %d), ("127.0.0.1", %d)]:
    try:
        socket.create_connection(addr, timeout=3)
        print("VERDICT bad: connected to", addr)
    except OSError as e:
        print("refused", addr, e)
print("VERDICT ok")`, hostIP(), o.HTTPSPort(), o.HTTPSPort()), "VERDICT ok"},
				{"UDP and DNS to the host: no route", fmt.Sprintf(`
import socket
s = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
s.settimeout(2)
try:
    s.sendto(b"\x12\x34\x01\x00\x00\x01\x00\x00\x00\x00\x00\x00\x07allowed\x04test\x00\x00\x01\x00\x01", (%q, 53))
    print("VERDICT bad: answer", s.recvfrom(512))
except OSError as e:
    print("VERDICT ok", e)`, hostIP()), "VERDICT ok"},
				{"raw sockets", `
import socket
try:
    socket.socket(socket.AF_INET, socket.SOCK_RAW, socket.IPPROTO_ICMP)
    print("VERDICT bad: a raw socket")
except OSError as e:
    print("VERDICT ok", e)`, "VERDICT ok"},
				{"only the placeholder is in the environment", verdict(fmt.Sprintf(`
import os, glob
secret = %q
assert os.environ.get("API_KEY") == "$API_KEY", os.environ.get("API_KEY")
assert not any(secret in v for v in os.environ.values())
for p in glob.glob("/proc/*/environ") + glob.glob("/proc/*/cmdline"):
    try:
        data = open(p, "rb").read()
    except OSError:
        continue
    if secret.encode() in data:
        print("VERDICT bad: in", p)
import stat
for root in ["/run/ci", "/srv", "/tmp", "/mnt/data", "/etc"]:
    for d, _, files in os.walk(root):
        for f in files:
            try:
                if not stat.S_ISREG(os.lstat(os.path.join(d, f)).st_mode):
                    continue  # the control FIFOs, the proxy's socket
                data = open(os.path.join(d, f), "rb").read()
            except OSError:
                continue
            if secret.encode() in data:
                print("VERDICT bad: in", os.path.join(d, f))`, secretValue)), "VERDICT ok"},
				{"the session is still usable", "print(6 * 7)", "42"},
			}
			for _, c := range cases {
				r := s.run(c.code, 40*time.Second)
				if r.Status != wire.StatusOK || !strings.Contains(string(r.Stdout), c.want) || strings.Contains(string(r.Stdout), "VERDICT bad") {
					t.Errorf("%s: %s; want ok with %q", c.name, describe(r), c.want)
				}
			}
			if got := o.Authorization(egresstest.SecretDomain); len(got) != 1 || got[0] != "Bearer "+secretValue {
				t.Errorf("%s got Authorization %q, want the secret once", egresstest.SecretDomain, got)
			}
			for _, a := range o.Authorization(egresstest.AllowedDomain) {
				if a != "Bearer $API_KEY" {
					t.Errorf("%s got Authorization %q, want the placeholder only", egresstest.AllowedDomain, a)
				}
			}
			wantRootUntouched(t, e.kind)
			for _, host := range []string{egresstest.EvilDomain, egresstest.SubdomainTrick} {
				if n := o.Hits(host); n != 0 {
					t.Errorf("%d requests reached %s", n, host)
				}
			}
		})
	}
}

// TestNetworkBudget: a session that spent its connections gets a clear
// 429 from the proxy, and its sandbox runs on.
func TestNetworkBudget(t *testing.T) {
	e := newNetEnv(t, false, func(c *egress.Config) { c.MaxConns = 2 })
	s, _ := e.startNet(t, policy())
	url := "https://" + egresstest.AllowedDomain + "/hello"
	for i := range 2 {
		s.expectOK(fetch(url, ""), "STATUS 200")
		_ = i
	}
	r := s.run(fetch(url, ""), 30*time.Second)
	if !strings.Contains(string(r.Stdout), "429") {
		t.Errorf("third connection: %s; want the proxy's 429", describe(r))
	}
	s.expectOK("print(6 * 7)", "42")
}

// TestNetworkSealed: a session without a policy is as sealed as ever: no
// proxy variables, no egress mount, nothing on the relay's port.
func TestNetworkSealed(t *testing.T) {
	e := newNetEnv(t, false)
	s := e.start(t)
	s.expectOK(verdict(`
import os, socket
assert not [k for k in os.environ if "proxy" in k.lower()], os.environ
assert os.listdir("/srv") == [], os.listdir("/srv")
assert sorted(os.listdir("/run/ci")) == ["in", "out"], os.listdir("/run/ci")
try:
    socket.create_connection(("127.0.0.1", 3128), timeout=2)
    print("VERDICT bad: something listens on 3128")
except OSError as e:
    print(e)`), "VERDICT ok")
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

// wantRootUntouched fails when a sandbox left anything in the shared root
// filesystem's mount point directories (runsc makes a missing mount point
// in the host's tree).
func wantRootUntouched(t *testing.T, k *gvisor.Kind) {
	t.Helper()
	root, err := gvisor.DefaultRootFS()
	if err != nil {
		t.Fatal(err)
	}
	for dir, want := range map[string]string{"run/ci": "in out", "tmp": "", "srv": ""} {
		ents, err := os.ReadDir(filepath.Join(root, dir))
		if err != nil {
			t.Fatal(err)
		}
		var names []string
		for _, e := range ents {
			names = append(names, e.Name())
		}
		if got := strings.Join(names, " "); got != want {
			t.Errorf("the root filesystem's /%s holds %q, want %q: a sandbox changed the shared tree", dir, got, want)
		}
	}
}

// hostPip is the pip the test installs with when the sandbox's root has
// none (the root's recipe gained python3-pip with network_policy; a root
// built before lacks it): Debian's own pip of this host, the same suite as
// the root, zipped without its caches.
const hostPip = "/usr/lib/python3/dist-packages/pip"

func zipDir(t *testing.T, dir, prefix string) []byte {
	t.Helper()
	var buf bytes.Buffer
	zw := zip.NewWriter(&buf)
	err := filepath.WalkDir(dir, func(p string, d fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		if d.IsDir() && d.Name() == "__pycache__" {
			return filepath.SkipDir
		}
		if !d.Type().IsRegular() {
			return nil
		}
		rel, _ := filepath.Rel(dir, p)
		w, err := zw.Create(prefix + "/" + rel)
		if err != nil {
			return err
		}
		data, err := os.ReadFile(p)
		if err != nil {
			return err
		}
		_, err = w.Write(data)
		return err
	})
	if err == nil {
		err = zw.Close()
	}
	if err != nil {
		t.Fatalf("zip %s: %v", dir, err)
	}
	return buf.Bytes()
}

// TestNetworkPip: pip installs the index's wheel through the proxy (the
// index is an allowed domain, over HTTPS tunnelled to the origin, whose
// certificate the sandbox's CA bundle trusts), and the kernel imports it
// in the same session.
func TestNetworkPip(t *testing.T) {
	e := newNetEnv(t, false)
	s, _ := e.startNet(t, policy())
	pipCmd := `[sys.executable, "-m", "pip"]`
	root, err := gvisor.DefaultRootFS()
	if err != nil {
		t.Fatal(err)
	}
	if _, err := os.Stat(filepath.Join(root, "usr/lib/python3/dist-packages/pip")); err != nil {
		if _, err := os.Stat(hostPip); err != nil {
			t.Fatalf("neither the sandbox's root (%s) nor this host has pip: rebuild the root (make setup) or apt-get install python3-pip", root)
		}
		t.Logf("the root %s has no pip (built before python3-pip joined its recipe): installing with this host's %s", root, hostPip)
		ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
		defer cancel()
		res, err := s.it.File(ctx, wire.KindPut, &wire.FileRequest{ID: 1, Path: "/tmp/pip.zip", Data: zipDir(t, hostPip, "pip")})
		if err != nil || res.Error != "" {
			t.Fatalf("put pip.zip: %v %+v", err, res)
		}
		pipCmd = `[sys.executable, "-c", "import sys; sys.path.insert(0, '/tmp/pip.zip'); from pip._internal.cli.main import main; sys.exit(main())"]`
	}
	r := s.run(fmt.Sprintf(`
import subprocess, sys
p = subprocess.run(%s + ["install", "--index-url", "https://%s/simple/", %q], capture_output=True, text=True, timeout=150)
print("RC", p.returncode)
print(p.stdout[-1500:])
print(p.stderr[-1500:])
`, pipCmd, egresstest.IndexDomain, egresstest.Package), 180*time.Second)
	if r.Status != wire.StatusOK || !strings.Contains(string(r.Stdout), "RC 0") {
		t.Fatalf("pip install: %s", describe(r))
	}
	s.expectOK("import "+egresstest.Package+"\nprint("+egresstest.Package+".answer())", egresstest.Answer)
}

// fetchTimer is Python that opens a new HTTPS connection to AllowedDomain
// and GETs /hello, N times after one warm-up, and prints the median in µs:
// through the relay and the proxy (PROXY: a CONNECT to 127.0.0.1:3128
// first) or straight to the origin. The same code either way, so the
// difference is the sandbox's network path (the relay, the host socket,
// the proxy's CONNECT and its dial).
const fetchTimer = `
import socket, ssl, statistics, time
ctx = ssl.create_default_context(cafile=CA)
def once():
    t = time.perf_counter()
    s = socket.create_connection((HOST, PORT))
    s.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)  # no Nagle wait behind a delayed ACK
    if PROXY:
        s.sendall(b"CONNECT allowed.test:443 HTTP/1.1\r\nHost: allowed.test:443\r\n\r\n")
        head = b""
        while b"\r\n\r\n" not in head:
            head += s.recv(4096)
        assert head.startswith(b"HTTP/1.1 200"), head
    c = ctx.wrap_socket(s, server_hostname="allowed.test")
    c.sendall(b"GET /hello HTTP/1.1\r\nHost: allowed.test\r\nConnection: close\r\n\r\n")
    data = b""
    while True:
        b = c.recv(4096)
        if not b:
            break
        data += b
    c.close()
    assert b"hello from allowed.test" in data, data
    return time.perf_counter() - t
once()
print("MEDIAN_US", int(statistics.median([once() for _ in range(N)]) * 1e6))
`

func medianUS(b *testing.B, out string) float64 {
	b.Helper()
	_, v, ok := strings.Cut(out, "MEDIAN_US ")
	if !ok {
		b.Fatalf("no median in %q", out)
	}
	n, err := strconv.Atoi(strings.TrimSpace(v))
	if err != nil {
		b.Fatalf("median %q: %v", v, err)
	}
	return float64(n)
}

// BenchmarkNetworkHTTPS: an allowed HTTPS request on a new connection from
// inside a networked sandbox (relay, host socket, egress proxy tunnel) and
// the same request from native /usr/bin/python3 straight to the origin,
// side by side in one run; b.N requests each, median reported.
func BenchmarkNetworkHTTPS(b *testing.B) {
	e := newNetEnv(b, false)
	b.Run("native-direct", func(b *testing.B) {
		ca := writeTemp(b, string(e.origins.CAPEM))
		code := fmt.Sprintf("CA, HOST, PORT, PROXY, N = %q, \"127.0.0.1\", %d, False, %d\n", ca, e.origins.HTTPSPort(), b.N) + fetchTimer
		b.ResetTimer()
		out, err := exec.Command(nativePython, "-c", code).CombinedOutput()
		if err != nil {
			b.Fatalf("%s: %v: %s", nativePython, err, out)
		}
		b.ReportMetric(medianUS(b, string(out)), "median-µs")
	})
	b.Run("sandbox-via-proxy", func(b *testing.B) {
		s, _ := e.startNet(b, policy())
		code := fmt.Sprintf("CA, HOST, PORT, PROXY, N = \"/srv/ca-bundle.pem\", \"127.0.0.1\", 3128, True, %d\n", b.N) + fetchTimer
		b.ResetTimer()
		r := s.run(code, 120*time.Second)
		if r.Status != wire.StatusOK {
			b.Fatalf("%s", describe(r))
		}
		b.ReportMetric(medianUS(b, string(r.Stdout)), "median-µs")
	})
}
