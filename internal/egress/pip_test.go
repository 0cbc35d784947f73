package egress

import (
	"archive/zip"
	"bytes"
	"crypto/sha256"
	"crypto/tls"
	"encoding/base64"
	"fmt"
	"net/http"
	"net/http/httptest"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
)

// tinyWheel is a pure-Python wheel, tinypkg 0.1, whose module says VALUE = 42.
func tinyWheel(t *testing.T) []byte {
	files := []struct{ name, body string }{
		{"tinypkg/__init__.py", "VALUE = 42\n"},
		{"tinypkg-0.1.dist-info/METADATA", "Metadata-Version: 2.1\nName: tinypkg\nVersion: 0.1\n"},
		{"tinypkg-0.1.dist-info/WHEEL", "Wheel-Version: 1.0\nGenerator: egress-test\nRoot-Is-Purelib: true\nTag: py3-none-any\n"},
	}
	var buf bytes.Buffer
	zw := zip.NewWriter(&buf)
	var record strings.Builder
	for _, f := range files {
		w, err := zw.Create(f.name)
		if err != nil {
			t.Fatal(err)
		}
		w.Write([]byte(f.body))
		sum := sha256.Sum256([]byte(f.body))
		fmt.Fprintf(&record, "%s,sha256=%s,%d\n", f.name, base64.RawURLEncoding.EncodeToString(sum[:]), len(f.body))
	}
	record.WriteString("tinypkg-0.1.dist-info/RECORD,,\n")
	w, _ := zw.Create("tinypkg-0.1.dist-info/RECORD")
	w.Write([]byte(record.String()))
	if err := zw.Close(); err != nil {
		t.Fatal(err)
	}
	return buf.Bytes()
}

// packageIndex serves a PEP 503 simple index with the wheel; with a
// token, every request must carry Basic credentials __token__:token.
func packageIndex(t *testing.T, ca *testCA, name, token string) string {
	wheel := tinyWheel(t)
	sum := sha256.Sum256(wheel)
	srv := httptest.NewUnstartedServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if token != "" {
			if u, p, ok := r.BasicAuth(); !ok || u != "__token__" || p != token {
				w.Header().Set("WWW-Authenticate", `Basic realm="index"`)
				http.Error(w, "unauthorized", http.StatusUnauthorized)
				return
			}
		}
		switch r.URL.Path {
		case "/simple/tinypkg/":
			fmt.Fprintf(w, `<!DOCTYPE html><html><body><a href="/files/tinypkg-0.1-py3-none-any.whl#sha256=%x">tinypkg-0.1-py3-none-any.whl</a></body></html>`, sum)
		case "/files/tinypkg-0.1-py3-none-any.whl":
			w.Write(wheel)
		default:
			http.NotFound(w, r)
		}
	}))
	srv.TLS = &tls.Config{Certificates: []tls.Certificate{ca.leaf(t, name)}}
	srv.StartTLS()
	t.Cleanup(srv.Close)
	return srv.Listener.Addr().String()
}

// TestPipInstall installs a wheel with /usr/bin/python3 -m pip through
// the proxy from an open index (tunnelled) and from a private one whose
// token is a domain secret (terminated: pip turns the URL's
// __token__:$PIP_TOKEN into Basic credentials, the proxy puts the value
// in), and fails clearly for an index off the list.
func TestPipInstall(t *testing.T) {
	const python = "/usr/bin/python3"
	if err := exec.Command(python, "-m", "pip", "--version").Run(); err != nil {
		t.Fatalf("%s -m pip does not run (apt-get install python3-pip): %v", python, err)
	}
	const token = "pypi-tok-7d1e2b9a"
	var ca *testCA
	e := newEnv(t, func(c *Config, p *Policy) {
		ca = newTestCA(t)
		c.RootCAs = ca.pool
		c.Resolve["pypi.test"] = packageIndex(t, ca, "pypi.test", "")
		c.Resolve["private.test"] = packageIndex(t, ca, "private.test", token)
		c.AllowedDomains = append(c.AllowedDomains, "pypi.test", "private.test")
		p.AllowedDomains = append(p.AllowedDomains, "pypi.test", "private.test")
		p.Secrets = append(p.Secrets, Secret{Domain: "private.test", Name: "PIP_TOKEN", Value: token})
	})
	caFile := filepath.Join(t.TempDir(), "ca.pem")
	if err := os.WriteFile(caFile, append(append([]byte(nil), ca.pem...), e.sess.CACertPEM()...), 0o644); err != nil {
		t.Fatal(err)
	}
	pip := func(index string, extra ...string) (string, string, error) {
		target := t.TempDir()
		cmd := exec.Command(python, append([]string{"-m", "pip", "install", "--no-deps", "--no-cache-dir", "--disable-pip-version-check",
			"--break-system-packages", "--target", target, "--index-url", index, "--cert", caFile, "--retries", "0", "--timeout", "20", "tinypkg"}, extra...)...)
		cmd.Env = []string{"PATH=/usr/bin:/bin", "HOME=" + t.TempDir(), "HTTPS_PROXY=http://" + e.tcpAddr, "HTTP_PROXY=http://" + e.tcpAddr, "PIP_CONFIG_FILE=/dev/null"}
		out, err := cmd.CombinedOutput()
		return string(out), target, err
	}
	for _, index := range []string{"https://pypi.test/simple", "https://__token__:$PIP_TOKEN@private.test/simple"} {
		t.Run(index, func(t *testing.T) {
			out, target, err := pip(index)
			if err != nil {
				t.Fatalf("pip: %v\n%s", err, out)
			}
			v, err := exec.Command(python, "-c", "import sys; sys.path.insert(0, sys.argv[1]); import tinypkg; print(tinypkg.VALUE)", target).CombinedOutput()
			if err != nil || strings.TrimSpace(string(v)) != "42" {
				t.Fatalf("import tinypkg: %v %s", err, v)
			}
			if strings.Contains(out, token) {
				t.Errorf("pip's output shows the token")
			}
		})
	}
	t.Run("an index off the list", func(t *testing.T) {
		before := e.counter("refused", reasonNotAllowed)
		// pip prints the proxy's 403 only at -vvv; without, "No matching distribution".
		out, _, err := pip("https://evil.test/simple", "-vvv")
		if err == nil || !strings.Contains(out, "403 Forbidden") || e.counter("refused", reasonNotAllowed) == before {
			t.Fatalf("pip: %v\n%s", err, out)
		}
	})
}
