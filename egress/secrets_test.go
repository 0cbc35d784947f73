package egress

import (
	"net/http"
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
		wantAuth, wantQuery string
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
			if !strings.Contains(body, "auth="+tc.wantAuth+" ") || !strings.HasSuffix(body, "query="+tc.wantQuery) {
				t.Errorf("origin saw %q; want auth=%q query=%q", body, tc.wantAuth, tc.wantQuery)
			}
		})
	}
	t.Run("other headers and header names", func(t *testing.T) {
		_, body, _, err := e.get("https://secret.test/headers", "X-Token", "t=$API_KEY", "X-$API_KEY", "x")
		if err != nil || !strings.Contains(body, "x-token=t="+testSecret) {
			t.Fatalf("got %q %v", body, err)
		}
		if r := e.tlsSeen.last(); r.Header.Get("X-$API_KEY") != "x" {
			t.Errorf("a header name was rewritten: %v", r.Header)
		}
	})
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
	if !strings.Contains(answers[0], testSecret) {
		t.Fatalf("the origin did not get the secret (%q): the test would prove nothing", answers[0])
	}
	answers = answers[1:] // the origin's echo of it is the point of the first request
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
