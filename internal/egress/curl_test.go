package egress

import (
	"bytes"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
)

// TestCurl drives the proxy with curl, the client the sandbox's code is
// most likely to shell out to, over the session's loopback TCP listener
// (curl 7.88 has no unix-socket HTTP proxies).
func TestCurl(t *testing.T) {
	curl, err := exec.LookPath("curl")
	if err != nil {
		t.Fatal("curl is not installed (apt-get install curl): this test drives the proxy with it")
	}
	e := newEnv(t)
	caFile := filepath.Join(t.TempDir(), "ca.pem")
	if err := os.WriteFile(caFile, append(append([]byte(nil), e.ca.pem...), e.sess.CACertPEM()...), 0o644); err != nil {
		t.Fatal(err)
	}
	run := func(args ...string) (string, string, int) {
		cmd := exec.Command(curl, append([]string{"-sS", "--max-time", "20", "--proxy", "http://" + e.tcpAddr, "--cacert", caFile}, args...)...)
		cmd.Env = []string{"PATH=/usr/bin:/bin", "HOME=" + t.TempDir()}
		var out, errb bytes.Buffer
		cmd.Stdout, cmd.Stderr = &out, &errb
		err := cmd.Run()
		code := 0
		if ee, ok := err.(*exec.ExitError); ok {
			code = ee.ExitCode()
		} else if err != nil {
			t.Fatal(err)
		}
		return out.String(), errb.String(), code
	}
	for _, tc := range []struct {
		name   string
		args   []string
		exit   int
		stdout string // a substring
		stderr string
	}{
		{"https tunnel", []string{"https://allowed.test/headers"}, 0, "host=allowed.test", ""},
		// The origin gets the value (checked below); its echo comes back redacted.
		{"https with a secret", []string{"-H", "Authorization: Bearer $API_KEY", "https://secret.test/headers"}, 0, "auth=Bearer $API_KEY ", ""},
		{"placeholder to another domain", []string{"-H", "Authorization: Bearer $API_KEY", "https://other.test/headers"}, 0, "auth=Bearer $API_KEY ", ""},
		{"plain http", []string{"http://plain.test/"}, 0, "hello from plain.test", ""},
		{"off-list https", []string{"https://evil.test/"}, 56, "", "403"},
		{"ip literal http", []string{"-i", "http://2130706433/"}, 0, "is an IP address", ""},
		{"wrong port", []string{"https://allowed.test:8443/"}, 56, "", "403"},
		{"off-list redirect, terminated", []string{"-i", "https://secret.test/redirect?to=https://evil.test/"}, 0, "502 Bad Gateway", ""},
	} {
		t.Run(tc.name, func(t *testing.T) {
			out, errOut, code := run(tc.args...)
			if tc.name == "https with a secret" {
				if got := e.tlsSeen.last().Header.Get("Authorization"); got != "Bearer "+testSecret {
					t.Errorf("the origin got Authorization %q", got)
				}
			}
			if code != tc.exit || !strings.Contains(out, tc.stdout) || !strings.Contains(errOut, tc.stderr) {
				t.Errorf("curl %v: exit %d, stdout %q, stderr %q; want exit %d, %q, %q", tc.args, code, out, errOut, tc.exit, tc.stdout, tc.stderr)
			}
		})
	}
}

// TestPythonClient fetches through the proxy with /usr/bin/python3's
// urllib and OpenSSL, with VERIFY_X509_STRICT on (Python 3.13's default),
// as the sandbox's code does: the session CA's certificates must pass a
// strict verifier, and HTTPS_PROXY is all the client needs.
func TestPythonClient(t *testing.T) {
	const python = "/usr/bin/python3"
	if _, err := os.Stat(python); err != nil {
		t.Fatalf("%s is missing (apt-get install python3): this test drives the proxy with it", python)
	}
	e := newEnv(t)
	caFile := filepath.Join(t.TempDir(), "ca.pem")
	if err := os.WriteFile(caFile, append(append([]byte(nil), e.ca.pem...), e.sess.CACertPEM()...), 0o644); err != nil {
		t.Fatal(err)
	}
	const script = `
import ssl, sys, urllib.request, urllib.error
ctx = ssl.create_default_context(cafile=sys.argv[1])
ctx.verify_flags |= ssl.VERIFY_X509_STRICT
opener = urllib.request.build_opener(urllib.request.HTTPSHandler(context=ctx))
for url in sys.argv[2:]:
    req = urllib.request.Request(url, headers={"Authorization": "Bearer $API_KEY"})
    try:
        with opener.open(req, timeout=20) as r:
            print(url, r.status, r.read().decode())
    except urllib.error.HTTPError as e:
        print(url, e.code, e.read().decode().strip())
    except OSError as e:
        print(url, "error", type(e).__name__, e)
`
	cmd := exec.Command(python, "-c", script, caFile, "https://secret.test/headers", "https://allowed.test/headers", "http://plain.test/headers", "https://evil.test/", "http://plainsecret.test/")

	cmd.Env = []string{"PATH=/usr/bin:/bin", "HTTPS_PROXY=http://" + e.tcpAddr, "HTTP_PROXY=http://" + e.tcpAddr}
	out, err := cmd.CombinedOutput()
	if err != nil {
		t.Fatalf("%v: %s", err, out)
	}
	lines := strings.Split(strings.TrimSpace(string(out)), "\n")
	for i, want := range []string{
		"https://secret.test/headers 200 host=secret.test auth=Bearer $API_KEY ", // the echo, redacted
		"https://allowed.test/headers 200 host=allowed.test auth=Bearer $API_KEY ",
		"http://plain.test/headers 200 host=plain.test auth=Bearer $API_KEY ",
		"https://evil.test/ error ",
		"http://plainsecret.test/ 200 hello from plainsecret.test",
	} {
		if i >= len(lines) || !strings.HasPrefix(lines[i], want) {
			t.Errorf("line %d: got %q, want prefix %q\n%s", i, lines[min(i, len(lines)-1)], want, out)
		}
	}
	if r := e.tlsSeen.forHost("secret.test"); r == nil || r.Header.Get("Authorization") != "Bearer "+testSecret {
		t.Errorf("secret.test's origin did not get the value: %v", r)
	}
	if !strings.Contains(lines[3], "403") {
		t.Errorf("the off-list refusal does not say 403: %q", lines[3])
	}
}
