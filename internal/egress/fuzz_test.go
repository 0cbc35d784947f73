package egress

import (
	"errors"
	"io"
	"net"
	"os"
	"strings"
	"testing"
	"time"
)

// FuzzPlainRequest throws arbitrary bytes at a session and checks what
// reached the plain-HTTP origin: only allowed names, and never the value
// of a secret (which must not travel in clear whatever the client sends).
func FuzzPlainRequest(f *testing.F) {
	for _, s := range []string{
		"GET http://plain.test/ HTTP/1.1\r\nHost: plain.test\r\n\r\n",
		"GET http://plainsecret.test/ HTTP/1.1\r\nAuthorization: Bearer $PLAIN_KEY\r\n\r\n",
		"GET http://plainsecret.test/ HTTP/1.1\r\nAuthorization: Basic X19fOiRQTEFJTl9LRVk=\r\n\r\n",
		"GET http://plainsecret.test/ HTTP/1.1\r\nX: ${PLAIN_KEY}\r\n\r\n",
		"GET http://evil.test/ HTTP/1.1\r\nHost: plain.test\r\n\r\n",
		"GET http://plain.test@evil.test/ HTTP/1.1\r\n\r\n",
		"GET http://evil.test#@plain.test/ HTTP/1.1\r\n\r\n",
		"GET http://plain.test/ HTTP/1.1\r\n\r\nGET http://evil.test/ HTTP/1.1\r\n\r\n",
		"POST http://plain.test/echo HTTP/1.1\r\nContent-Length: 5\r\nTransfer-Encoding: chunked\r\n\r\n0\r\n\r\nGET http://evil.test/ HTTP/1.1\r\n\r\n",
		"GET http://PLAIN.TEST./ HTTP/1.0\r\n\r\n",
		"GET http://pl%61in.test/ HTTP/1.1\r\n\r\n",
		"CONNECT plain.test:80 HTTP/1.1\r\n\r\n",
	} {
		f.Add([]byte(s))
	}
	e := newEnv(f, func(c *Config, _ *Policy) {
		c.IdleTimeout = 200 * time.Millisecond
		c.MaxConns = 1 << 30
		c.MaxBytes = 1 << 50
	})
	f.Fuzz(func(t *testing.T, data []byte) {
		c, err := net.Dial("unix", e.sock)
		if err != nil {
			t.Fatal(err)
		}
		c.Write(data)
		c.(*net.UnixConn).CloseWrite() // end of input: the proxy need not wait for more
		c.SetReadDeadline(time.Now().Add(5 * time.Second))
		_, err = io.Copy(io.Discard, c)
		c.Close()
		if errors.Is(err, os.ErrDeadlineExceeded) {
			t.Fatalf("the proxy kept the connection open after %q", data)
		}
		e.httpSeen.mu.Lock()
		defer e.httpSeen.mu.Unlock()
		for _, r := range e.httpSeen.reqs {
			if h := r.Host; h != "plain.test" && h != "plainsecret.test" {
				t.Fatalf("the origin got a request for %q from %q", h, data)
			}
			for k, vs := range r.Header {
				for _, v := range vs {
					if strings.Contains(v, testSecret) {
						t.Fatalf("the secret went over plain HTTP in %s, from %q", k, data)
					}
				}
			}
		}
	})
}
