package egress

import (
	"io"
	"net/http"
	"os"
	"os/exec"
	"strings"
	"testing"
)

func TestSecretSubstitutedOnlyForItsDomain(t *testing.T) {
	e := newEnv(t)
	if got := e.sess.Placeholders(); got["API_KEY"] != "$API_KEY" || got["PLAIN_KEY"] != "$PLAIN_KEY" || len(got) != 2 {
		t.Fatalf("Placeholders() = %v", got)
	}
	for _, tc := range []struct {
		name, url, hdr, val string
		wantAuth, wantQuery string // what the origin got
	}{
		{"its domain, header", "https://secret.test/headers", "Authorization", "Bearer $API_KEY", "Bearer " + testSecret, ""},
		{"its domain, twice in one value", "https://secret.test/headers", "Authorization", "$API_KEY:$API_KEY", testSecret + ":" + testSecret, ""},
		{"its domain, longer name is not the placeholder", "https://secret.test/headers", "Authorization", "Bearer $API_KEYS", "Bearer $API_KEYS", ""},
		{"its domain, in the query: not substituted", "https://secret.test/headers?k=$API_KEY", "Authorization", "none", "none", "k=$API_KEY"},
		{"another allowed domain (tunnel)", "https://other.test/headers", "Authorization", "Bearer $API_KEY", "Bearer $API_KEY", ""},
		{"another secret's placeholder", "https://secret.test/headers", "Authorization", "Bearer $PLAIN_KEY", "Bearer $PLAIN_KEY", ""},
		{"plain http to a domain without secrets", "http://plain.test/headers", "Authorization", "Bearer $API_KEY", "Bearer $API_KEY", ""},
	} {
		t.Run(tc.name, func(t *testing.T) {
			code, body, _, err := e.get(tc.url, tc.hdr, tc.val)
			if err != nil || code != 200 {
				t.Fatalf("GET = %d %q %v", code, body, err)
			}
			r := e.tlsSeen.last()
			if strings.HasPrefix(tc.url, "http:") {
				r = e.httpSeen.last()
			}
			if got := r.Header.Get(tc.hdr); got != tc.wantAuth || r.URL.RawQuery != tc.wantQuery {
				t.Errorf("origin got %s %q query %q; want %q %q", tc.hdr, got, r.URL.RawQuery, tc.wantAuth, tc.wantQuery)
			}
			if strings.Contains(body, testSecret) {
				t.Errorf("the origin's echo reached the client with the value: %q", body)
			}
		})
	}
	t.Run("other headers and header names", func(t *testing.T) {
		_, _, _, err := e.get("https://secret.test/headers", "X-Token", "t=$API_KEY", "X-$API_KEY", "x")
		r := e.tlsSeen.last()
		if err != nil || r.Header.Get("X-Token") != "t="+testSecret {
			t.Fatalf("origin got X-Token %q (%v)", r.Header.Get("X-Token"), err)
		}
		if r.Header.Get("X-$API_KEY") != "x" {
			t.Errorf("a header name was rewritten: %v", r.Header)
		}
	})
}

// TestSecretEchoRedacted: an origin that reflects the request's headers
// (httpbin.org/headers, OpenAI's own example) must not hand the code the
// value: the proxy takes it back out of the response's headers and body,
// verbatim, JSON-escaped, or gzip'd; a body it cannot decode is refused.
func TestSecretEchoRedacted(t *testing.T) {
	const odd = `tok/en"é<>&\x` // escapes differently in JSON encoders
	e := newEnv(t, func(_ *Config, p *Policy) {
		p.Secrets = append(p.Secrets, Secret{Domain: "other.test", Name: "ODD", Value: odd})
	})
	for _, tc := range []struct {
		url, hdr, want string
		code           int
	}{
		{"https://secret.test/headers", "Bearer $API_KEY", "auth=Bearer $API_KEY ", 200},
		{"https://secret.test/echo-gzip", "Bearer $API_KEY", "auth=Bearer $API_KEY", 200},
		{"https://other.test/echo-json", "Bearer $ODD", `{"headers":{"Authorization":"Bearer $ODD"}}`, 200},
		{"https://secret.test/echo-br", "Bearer $API_KEY", "cannot check", 502},
	} {
		t.Run(tc.url, func(t *testing.T) {
			code, body, _, err := e.get(tc.url, "Authorization", tc.hdr)
			if err != nil || code != tc.code || !strings.Contains(body, tc.want) {
				t.Fatalf("got %d %q %v; want %d with %q", code, body, err, tc.code, tc.want)
			}
			if got := e.tlsSeen.last().Header.Get("Authorization"); strings.Contains(got, "$") {
				t.Errorf("the origin got %q: the test proves nothing", got)
			}
		})
	}
	t.Run("in a response header", func(t *testing.T) {
		_, _, hdr, err := e.get("https://secret.test/echo-header", "Authorization", "Bearer $API_KEY")
		if err != nil || hdr.Get("X-Echo") != "you sent Bearer $API_KEY" {
			t.Fatalf("X-Echo %q %v", hdr.Get("X-Echo"), err)
		}
	})
}

// TestRedactorFindsSplitPatterns streams through reads of every size so a
// pattern falls across read boundaries at each offset.
func TestRedactorFindsSplitPatterns(t *testing.T) {
	pats := echoPatterns([]Secret{{Name: "K", Value: "SECRET-VALUE"}, {Name: "L", Value: "SEC"}})
	in := strings.Repeat("ab SECRET-VALUE cd SEC SECRET-VALUESECRET-VALUE ", 50)
	want := strings.Repeat("ab $K cd $L $K$K ", 50)
	for size := 1; size <= 40; size++ {
		r := newRedactor(io.NopCloser(&chunked{s: in, n: size}), pats)
		got, err := io.ReadAll(r)
		if err != nil || string(got) != want {
			t.Fatalf("reads of %d: got %q (%v)", size, got, err)
		}
	}
}

type chunked struct {
	s string
	n int
}

func (c *chunked) Read(p []byte) (int, error) {
	if c.s == "" {
		return 0, io.EOF
	}
	n := copy(p[:min(len(p), c.n)], c.s)
	c.s = c.s[n:]
	return n, nil
}

// TestJSONEscapeMatchesPython: the ensure_ascii spelling looked for is
// the one /usr/bin/python3's json module writes.
func TestJSONEscapeMatchesPython(t *testing.T) {
	const python = "/usr/bin/python3"
	if _, err := os.Stat(python); err != nil {
		t.Fatalf("%s is missing (apt-get install python3)", python)
	}
	for _, v := range []string{`tok/en"é<>&\x`, "plain", "emoji 😀 and tab\t", "ünï"} {
		out, err := exec.Command(python, "-c", "import json,sys; sys.stdout.write(json.dumps(sys.argv[1])[1:-1])", v).Output()
		if err != nil {
			t.Fatal(err)
		}
		if got := jsonASCII(v); got != string(out) {
			t.Errorf("%q: got %q, python writes %q", v, got, out)
		}
	}
}

func TestSecretNeverOverPlainHTTP(t *testing.T) {
	e := newEnv(t)
	before := e.httpSeen.count()
	code, body, hdr, err := e.get("http://plainsecret.test/headers", "Authorization", "Bearer $PLAIN_KEY")
	if err != nil || code != 403 || hdr.Get("X-Codeinterp-Egress-Refused") != reasonSecretPlain || !strings.Contains(body, "only sent over https") {
		t.Fatalf("got %d %q %v", code, body, err)
	}
	if e.httpSeen.count() != before {
		t.Fatal("the origin got the request")
	}
	// Without a placeholder the domain is reachable over plain HTTP.
	code, body, _, err = e.get("http://plainsecret.test/headers", "Authorization", "Bearer public")
	if err != nil || code != 200 || !strings.Contains(body, "auth=Bearer public") {
		t.Fatalf("got %d %q %v", code, body, err)
	}
}

func TestRedirects(t *testing.T) {
	e := newEnv(t)
	for _, tc := range []struct {
		name, url string
		code      int
	}{
		{"terminated, off the list", "https://secret.test/redirect?to=https://evil.test/steal", 502},
		{"terminated, off the list by scheme-relative URL", "https://secret.test/redirect?to=//evil.test/", 502},
		{"terminated, to an IP literal", "https://secret.test/redirect?to=https://127.0.0.1/", 502},
		{"terminated, to an allowed domain on a wrong port", "https://secret.test/redirect?to=https://allowed.test:8443/", 502},
		{"terminated, to a non-http scheme", "https://secret.test/redirect?to=file:///etc/passwd", 502},
		{"plain, off the list", "http://plain.test/redirect?to=http://evil.test/", 502},
		{"terminated, relative", "https://secret.test/redirect?to=/headers", 302},
		{"terminated, to another allowed domain", "https://secret.test/redirect?to=https://allowed.test/", 302},
		{"plain, to https on its own domain", "http://plain.test/redirect?to=https://plain.test/", 302},
	} {
		t.Run(tc.name, func(t *testing.T) {
			before := e.counter("refused", reasonRedirect)
			code, body, hdr, err := e.get(tc.url, "Authorization", "Bearer $API_KEY")
			if err != nil || code != tc.code {
				t.Fatalf("got %d %q %v, want %d", code, body, err, tc.code)
			}
			if tc.code == 502 {
				if hdr.Get("X-Codeinterp-Egress-Refused") != reasonRedirect || !strings.Contains(body, "outside this session's network policy") && !strings.Contains(body, "unparseable") {
					t.Errorf("answer %q %v", body, hdr)
				}
				if e.counter("refused", reasonRedirect)-before != 1 {
					t.Error("not counted")
				}
				if strings.Contains(body, testSecret) || strings.Contains(body, "steal") {
					t.Errorf("the reason holds more than the host: %q", body)
				}
			}
		})
	}
	t.Run("tunnel: the client follows, its CONNECT is refused", func(t *testing.T) {
		c := e.client()
		c.CheckRedirect = nil
		before := e.counter("refused", reasonNotAllowed)
		_, err := c.Get("https://allowed.test/redirect?to=https://evil.test/")
		if err == nil || !strings.Contains(err.Error(), "Forbidden") {
			t.Fatalf("got %v, want the CONNECT refused", err)
		}
		if e.counter("refused", reasonNotAllowed)-before != 1 {
			t.Error("not counted")
		}
	})
}

// TestSecretNotInLogsMetricsOrErrors runs traffic that uses the secret,
// refusals and failures, then looks for the value everywhere the proxy
// writes.
func TestSecretNotInLogsMetricsOrErrors(t *testing.T) {
	e := newEnv(t)
	var answers []string
	for _, u := range []string{
		"https://secret.test/headers",
		"https://secret.test/redirect?to=https://evil.test/",
		"http://plainsecret.test/headers",
		"https://other.test/headers",
		"https://evil.test/",
	} {
		code, body, hdr, err := e.get(u, "Authorization", "Bearer $API_KEY $PLAIN_KEY")
		answers = append(answers, body)
		for k, v := range hdr {
			answers = append(answers, k+strings.Join(v, ","))
		}
		if err != nil {
			answers = append(answers, err.Error())
		}
		_ = code
	}
	answers = append(answers, e.raw("GET http://plainsecret.test/ HTTP/1.1\r\nAuthorization: $PLAIN_KEY\r\n\r\n"))
	if r := e.tlsSeen.forHost("secret.test"); r == nil || !strings.Contains(r.Header.Get("Authorization"), testSecret) {
		t.Fatalf("the origin did not get the secret: the test would prove nothing")
	}
	e.sess.Close()
	for where, text := range map[string]string{"logs": e.logText(), "metrics": e.metricsText(), "answers": strings.Join(answers, "\n")} {
		if text == "" {
			t.Errorf("%s: empty; the check would prove nothing", where)
		}
		if strings.Contains(text, testSecret) {
			t.Errorf("%s hold the secret's value", where)
		}
	}
	if !strings.Contains(e.logText(), "secret.test") {
		t.Error("the logs do not even name the host; the grep is looking at the wrong output")
	}
}

func TestNoCAWithoutSecrets(t *testing.T) {
	e := newEnv(t, func(_ *Config, p *Policy) { p.Secrets = nil })
	if e.sess.CACertPEM() != nil {
		t.Error("a CA for a policy without secrets")
	}
	code, _, _, err := e.get("https://secret.test/")
	if err != nil || code != 200 {
		t.Fatalf("%d %v", code, err)
	}
	if e.counter("allowed", reasonTunnel) != 1 {
		t.Error("not tunnelled")
	}
	_ = http.StatusOK
}
