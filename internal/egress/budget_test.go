package egress

import (
	"context"
	"crypto/tls"
	"errors"
	"io"
	"net"
	"net/http"
	"os"
	"strings"
	"sync"
	"testing"
	"time"
)

func TestConnectionBudget(t *testing.T) {
	e := newEnv(t, func(c *Config, _ *Policy) { c.MaxConns = 3 })
	for i, u := range []string{"https://allowed.test/", "http://plain.test/", "https://secret.test/"} {
		if code, _, _, err := e.get(u); err != nil || code != 200 {
			t.Fatalf("request %d: %d %v", i, code, err)
		}
	}
	code, body, hdr, err := e.get("http://plain.test/")
	if err != nil || code != 429 || hdr.Get("X-Codeinterp-Egress-Refused") != reasonConnBudget || !strings.Contains(body, "connection budget (3 connections) is spent") {
		t.Fatalf("4th: %d %q %v", code, body, err)
	}
	_, err = e.client().Get("https://allowed.test/")
	if err == nil || !strings.Contains(err.Error(), "Too Many Requests") {
		t.Fatalf("4th CONNECT: %v", err)
	}
}

func TestByteBudgetCutsTheConnection(t *testing.T) {
	const budget = 256 << 10
	e := newEnv(t, func(c *Config, _ *Policy) { c.MaxBytes = budget })
	for _, u := range []string{"https://allowed.test/big?n=1048576", "https://secret.test/big?n=1048576"} {
		t.Run(u, func(t *testing.T) {
			e.sess.bytesUsed.Store(0)
			before := e.counter("refused", reasonByteBudget)
			resp, err := e.client().Get(u)
			var n int64
			if err == nil {
				n, err = io.Copy(io.Discard, resp.Body)
				resp.Body.Close()
			}
			if err == nil || n >= 1<<20 {
				t.Fatalf("read %d bytes, err %v; want the connection cut", n, err)
			}
			if n > budget {
				t.Errorf("%d bytes got through a %d budget", n, budget)
			}
			if e.counter("refused", reasonByteBudget)-before < 1 {
				t.Error("the cut is not counted")
			}
			// The session is still there, and says why it refuses more.
			code, body, _, err := e.get("http://plain.test/")
			if err != nil || code != 429 || !strings.Contains(body, "byte budget") {
				t.Errorf("next request: %d %q %v", code, body, err)
			}
		})
	}
}

func TestConcurrencyBound(t *testing.T) {
	e := newEnv(t, func(c *Config, _ *Policy) { c.MaxConcurrent = 2; c.IdleTimeout = 5 * time.Second })
	var held []net.Conn
	for i := 0; i < 2; i++ {
		c, err := net.Dial("unix", e.sock)
		if err != nil {
			t.Fatal(err)
		}
		defer c.Close()
		held = append(held, c)
	}
	// The held connections are accepted before the third is refused: wait
	// until the session counts them.
	for e.sess.open.Load() < 2 {
		time.Sleep(time.Millisecond)
	}
	code, reason := status(t, e.raw("GET http://plain.test/ HTTP/1.1\r\n\r\n"))
	if code != 429 || reason != reasonConcurrency {
		t.Fatalf("third: %d %q", code, reason)
	}
	held[0].Close()
	for e.sess.open.Load() > 1 {
		time.Sleep(time.Millisecond)
	}
	if code, _, _, err := e.get("http://plain.test/"); err != nil || code != 200 {
		t.Fatalf("after one closed: %d %v", code, err)
	}
}

// expectClosedByProxy reads c until the proxy closes it. The test's own
// deadline (far beyond IdleTimeout) firing means the proxy did not.
func expectClosedByProxy(t *testing.T, c net.Conn) string {
	t.Helper()
	c.SetReadDeadline(time.Now().Add(15 * time.Second))
	b, err := io.ReadAll(c)
	if errors.Is(err, os.ErrDeadlineExceeded) {
		t.Fatalf("the proxy kept the connection open (read %q)", b)
	}
	return string(b)
}

func TestSlowLorisClient(t *testing.T) {
	e := newEnv(t)
	for _, tc := range []struct{ name, prefix string }{
		{"request headers, a byte at a time", "GET http://plain.test/ HTTP/1.1\r\nHost: plain.test\r\nX-Slow: "},
		{"ClientHello, a byte at a time", "CONNECT allowed.test:443 HTTP/1.1\r\n\r\n\x16\x03\x01\x00\x30\x01\x00\x00\x2c"},
		{"nothing at all (an idle keep-alive connection)", ""},
	} {
		t.Run(tc.name, func(t *testing.T) {
			before := e.counter("refused", reasonTimeout)
			c, err := net.Dial("unix", e.sock)
			if err != nil {
				t.Fatal(err)
			}
			defer c.Close()
			io.WriteString(c, tc.prefix)
			stop := make(chan struct{})
			var wg sync.WaitGroup
			wg.Add(1)
			go func() {
				defer wg.Done()
				if tc.prefix == "" {
					return // quiet: nothing trickles
				}
				tick := time.NewTicker(50 * time.Millisecond) // well inside IdleTimeout each time
				defer tick.Stop()
				for {
					select {
					case <-stop:
						return
					case <-tick.C:
						if _, err := c.Write([]byte("a")); err != nil {
							return
						}
					}
				}
			}()
			got := expectClosedByProxy(t, c)
			close(stop)
			wg.Wait()
			if strings.HasPrefix(tc.prefix, "GET") {
				if code, reason := status(t, got); code != 408 || reason != reasonTimeout {
					t.Errorf("got %q", got)
				}
			}
			if tc.prefix != "" && e.counter("refused", reasonTimeout)-before != 1 {
				t.Error("not counted as a timeout")
			}
			if tc.prefix == "" && (got != "" || e.counter("refused", reasonTimeout) != before) {
				t.Errorf("a quiet connection got %q and counted as a refusal", got)
			}
		})
	}
}

// slowOrigin is a raw TCP origin that answers every connection with a
// status line and then one header byte every 50 ms, for ever.
func slowOrigin(t *testing.T, tlsCfg *tls.Config) string {
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	if tlsCfg != nil {
		l = tls.NewListener(l, tlsCfg)
	}
	done := make(chan struct{})
	var wg sync.WaitGroup
	t.Cleanup(func() { close(done); l.Close(); wg.Wait() })
	wg.Add(1)
	go func() {
		defer wg.Done()
		for {
			c, err := l.Accept()
			if err != nil {
				return
			}
			wg.Add(1)
			go func() {
				defer wg.Done()
				defer c.Close()
				buf := make([]byte, 4096)
				c.Read(buf)
				io.WriteString(c, "HTTP/1.1 200 OK\r\nX-Slow: ")
				for {
					select {
					case <-done:
						return
					case <-time.After(50 * time.Millisecond):
					}
					if _, err := c.Write([]byte("z")); err != nil {
						return
					}
				}
			}()
		}
	}()
	return l.Addr().String()
}

func TestSlowLorisOrigin(t *testing.T) {
	var ca *testCA
	e := newEnv(t, func(c *Config, p *Policy) {
		ca = newTestCA(t)
		c.RootCAs = ca.pool
		c.Resolve["slow.test"] = slowOrigin(t, nil)
		c.Resolve["slowtls.test"] = slowOrigin(t, &tls.Config{Certificates: []tls.Certificate{ca.leaf(t, "slowtls.test")}})
		c.AllowedDomains = append(c.AllowedDomains, "slowtls.test")
		p.AllowedDomains = append(p.AllowedDomains, "slowtls.test")
		p.Secrets = append(p.Secrets, Secret{Domain: "slowtls.test", Name: "SLOW", Value: "x"})
	})
	for _, u := range []string{"http://slow.test/", "https://slowtls.test/"} {
		t.Run(u, func(t *testing.T) {
			before := e.counter("refused", reasonTimeout)
			code, body, hdr, err := e.get(u)
			if err != nil || code != 504 || hdr.Get("X-Codeinterp-Egress-Refused") != reasonTimeout || !strings.Contains(body, "did not send its response headers") {
				t.Fatalf("got %d %q %v", code, body, err)
			}
			if e.counter("refused", reasonTimeout)-before != 1 {
				t.Error("not counted")
			}
		})
	}
}

// TestIdleFlowIsCut: once headers are through, a flow in which nothing
// moves either way for IdleTimeout is closed — tunnelled or terminated —
// while one that keeps moving is not.
func TestIdleFlowIsCut(t *testing.T) {
	e := newEnv(t)
	for _, u := range []string{"https://allowed.test/stall", "https://secret.test/stall", "http://plain.test/stall"} {
		t.Run(u, func(t *testing.T) {
			resp, err := e.client().Get(u)
			if err != nil {
				t.Fatal(err)
			}
			defer resp.Body.Close()
			_, err = io.ReadAll(resp.Body)
			if err == nil {
				t.Fatal("the stalled body ended cleanly")
			}
			if errors.Is(err, context.DeadlineExceeded) || strings.Contains(err.Error(), "Client.Timeout") {
				t.Fatalf("the client's own timeout fired, not the proxy's: %v", err)
			}
		})
	}
	t.Run("a slow but steady download is not idle", func(t *testing.T) {
		// 1 MiB in 32 KiB writes: each write is well inside IdleTimeout.
		code, body, _, err := e.get("https://allowed.test/big?n=1048576")
		if err != nil || code != 200 || len(body) != 1<<20 {
			t.Fatalf("%d %d %v", code, len(body), err)
		}
	})
}

// TestRebinding: the proxy resolves once per connection and dials what it
// checked. An answer that is public first and loopback next does not get
// the first connection to loopback, and the second connection is refused.
func TestRebinding(t *testing.T) {
	e := newEnv(t, func(c *Config, _ *Policy) { c.DialTimeout = 300 * time.Millisecond })
	e.dns.set("rebind.test", func(n int) []net.IP {
		if n == 0 {
			return []net.IP{net.ParseIP("192.0.2.1")} // TEST-NET-1: public in form, unreachable here
		}
		return []net.IP{net.ParseIP("127.0.0.1")}
	})
	got := e.raw("CONNECT rebind.test:443 HTTP/1.1\r\n\r\n")
	code, reason := status(t, got)
	if code != 502 && code != 504 || reason != reasonDialFailed {
		t.Fatalf("first: %q, want a failed dial to 192.0.2.1", got)
	}
	if q := e.dns.aQueries("rebind.test"); q != 1 {
		t.Errorf("%d A queries for one connection, want 1", q)
	}
	code, reason = status(t, e.raw("CONNECT rebind.test:443 HTTP/1.1\r\n\r\n"))
	if code != 403 || reason != reasonPrivateAddress {
		t.Fatalf("second: %d %q", code, reason)
	}
}

func TestSessionCloseEndsConnections(t *testing.T) {
	e := newEnv(t, func(c *Config, _ *Policy) { c.IdleTimeout = time.Minute })
	errs := make(chan error, 3)
	for _, u := range []string{"https://allowed.test/stall", "https://secret.test/stall", "http://plain.test/stall"} {
		go func() {
			resp, err := e.client().Get(u)
			if err == nil {
				_, err = io.ReadAll(resp.Body)
				resp.Body.Close()
			}
			errs <- err
		}()
	}
	for e.tlsSeen.count()+e.httpSeen.count() < 3 {
		time.Sleep(5 * time.Millisecond)
	}
	if err := e.sess.Close(); err != nil {
		t.Fatal(err)
	}
	for i := 0; i < 3; i++ {
		select {
		case err := <-errs:
			if err == nil {
				t.Error("a stalled request completed")
			}
		case <-time.After(10 * time.Second):
			t.Fatal("a connection outlived Session.Close")
		}
	}
	if _, err := net.Dial("unix", e.sock); err == nil {
		t.Error("the listener still accepts")
	}
	if _, err := e.proxy.Open(context.Background(), Policy{AllowedDomains: []string{"allowed.test"}}); err != nil {
		t.Errorf("the proxy cannot open another session: %v", err)
	}
	_ = http.StatusOK
}
