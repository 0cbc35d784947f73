package egress

import (
	"bufio"
	"crypto/tls"
	"crypto/x509"
	"io"
	"net"
	"net/http"
	"strings"
	"testing"
	"time"
)

// TestHostMustMatchInsideTerminatedTunnel: once the proxy terminates TLS
// for secret.test, each request on that connection must be for
// secret.test: a Host naming another domain (allowed or not) is refused
// rather than sent, with the secret, to secret.test's origin.
func TestHostMustMatchInsideTerminatedTunnel(t *testing.T) {
	e := newEnv(t)
	pool := x509.NewCertPool()
	pool.AppendCertsFromPEM(e.sess.CACertPEM())
	for _, tc := range []struct {
		name, host string
		code       int
	}{
		{"its own name", "secret.test", 200},
		{"its own name with :443", "secret.test:443", 200},
		{"upper case", "SECRET.test", 200},
		{"another allowed domain", "other.test", 403},
		{"an off-list domain", "evil.test", 403},
		{"its name on another port", "secret.test:8443", 403},
	} {
		t.Run(tc.name, func(t *testing.T) {
			c, err := net.Dial("unix", e.sock)
			if err != nil {
				t.Fatal(err)
			}
			defer c.Close()
			io.WriteString(c, "CONNECT secret.test:443 HTTP/1.1\r\n\r\n")
			br := bufio.NewReader(c)
			resp, err := http.ReadResponse(br, nil)
			if err != nil || resp.StatusCode != 200 {
				t.Fatalf("CONNECT: %v %v", resp, err)
			}
			tc2 := tls.Client(c, &tls.Config{ServerName: "secret.test", RootCAs: pool})
			before := e.tlsSeen.count()
			io.WriteString(tc2, "GET /headers HTTP/1.1\r\nHost: "+tc.host+"\r\nAuthorization: $API_KEY\r\n\r\n")
			resp, err = http.ReadResponse(bufio.NewReader(tc2), nil)
			if err != nil {
				t.Fatal(err)
			}
			body, _ := io.ReadAll(resp.Body)
			if resp.StatusCode != tc.code {
				t.Fatalf("got %d %q, want %d", resp.StatusCode, body, tc.code)
			}
			if tc.code == 403 {
				if resp.Header.Get("X-Codeinterp-Egress-Refused") != reasonHostMismatch || e.tlsSeen.count() != before {
					t.Errorf("refusal %v; origin requests %d -> %d", resp.Header, before, e.tlsSeen.count())
				}
			}
		})
	}
}

// TestPlainHTTPHostIsTheURLs: for an absolute-form request the origin gets
// the URL's host, whatever Host header the client sent (RFC 9112 §3.2.2).
func TestPlainHTTPHostIsTheURLs(t *testing.T) {
	e := newEnv(t)
	got := e.raw("GET http://plain.test/headers HTTP/1.1\r\nHost: evil.test\r\nConnection: close\r\n\r\n")
	if !strings.Contains(got, "host=plain.test ") {
		t.Fatalf("origin saw %q", got)
	}
}

// TestBodiesPassUnchanged: bodies are relayed as sent, both ways, through
// every mode (100-continue answered by the proxy), and a placeholder in a
// body is not substituted: only headers are.
func TestBodiesPassUnchanged(t *testing.T) {
	e := newEnv(t)
	body := strings.Repeat("payload $API_KEY ", 20000)
	for _, u := range []string{"https://allowed.test/echo", "https://secret.test/echo", "http://plain.test/echo"} {
		t.Run(u, func(t *testing.T) {
			c := e.client()
			c.Transport.(*http.Transport).ExpectContinueTimeout = 10 * time.Second
			req, _ := http.NewRequest("POST", u, strings.NewReader(body))
			req.Header.Set("Expect", "100-continue")
			resp, err := c.Do(req)
			if err != nil {
				t.Fatal(err)
			}
			defer resp.Body.Close()
			back, err := io.ReadAll(resp.Body)
			if err != nil || string(back) != body {
				t.Errorf("the echo came back with %d bytes (%v), want the %d sent", len(back), err, len(body))
			}
			r := e.tlsSeen.last()
			if strings.HasPrefix(u, "http:") {
				r = e.httpSeen.last()
			}
			if resp.StatusCode != 200 || r.Method != "POST" || r.Header.Get("X-Body") != body[:64] || r.Header.Get("X-Body-Len") != "340000" {
				t.Errorf("status %d; origin got %s len %s %q", resp.StatusCode, r.Method, r.Header.Get("X-Body-Len"), r.Header.Get("X-Body"))
			}
		})
	}
}
