package egress

import (
	"bytes"
	"context"
	"io"
	"net"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"
)

// TestSessionsAreIsolated: two sessions of one proxy share nothing a
// sandbox could use: not the allowed domains, not the secrets or the CA
// that signs for them, not the budgets.
func TestSessionsAreIsolated(t *testing.T) {
	e := newEnv(t, func(c *Config, _ *Policy) { c.MaxConns = 2 })
	other, err := e.proxy.Open(context.Background(), Policy{
		AllowedDomains: []string{"other.test"},
		Secrets:        []Secret{{Domain: "other.test", Name: "OTHER", Value: "other-value-123"}},
	})
	if err != nil {
		t.Fatal(err)
	}
	sock := filepath.Join(t.TempDir(), "other.sock")
	l, err := other.ListenUnix(sock)
	if err != nil {
		t.Fatal(err)
	}
	go other.Serve(l)
	defer other.Close()
	if fi, err := os.Stat(sock); err != nil || fi.Mode().Perm() != 0o666 {
		t.Errorf("socket mode %v %v, want 0666", fi.Mode(), err)
	}
	if bytes.Equal(other.CACertPEM(), e.sess.CACertPEM()) || other.CACertPEM() == nil {
		t.Error("the sessions share a CA")
	}
	if p := other.Placeholders(); len(p) != 1 || p["OTHER"] != "$OTHER" {
		t.Errorf("placeholders %v", p)
	}
	ask := func(sock, req string) string {
		c, err := net.Dial("unix", sock)
		if err != nil {
			t.Fatal(err)
		}
		defer c.Close()
		io.WriteString(c, req)
		c.SetReadDeadline(time.Now().Add(10 * time.Second))
		b, _ := io.ReadAll(c)
		return string(b)
	}
	// Spend the first session's connection budget.
	for i := 0; i < 3; i++ {
		ask(e.sock, "GET http://plain.test/ HTTP/1.1\r\nConnection: close\r\n\r\n")
	}
	if code, reason := status(t, ask(e.sock, "GET http://plain.test/ HTTP/1.1\r\n\r\n")); code != 429 || reason != reasonConnBudget {
		t.Fatalf("first session: %d %s", code, reason)
	}
	// The second session: its own budget, its own list.
	if code, reason := status(t, ask(sock, "CONNECT allowed.test:443 HTTP/1.1\r\n\r\n")); code != 403 || reason != reasonNotAllowed {
		t.Errorf("the second session reaches the first's domain: %d %s", code, reason)
	}
	if got := ask(sock, "CONNECT other.test:443 HTTP/1.1\r\n\r\n"); !strings.HasPrefix(got, "HTTP/1.1 200") {
		t.Errorf("the second session's own domain: %q", got)
	}
	// Closing the proxy closes every session.
	e.proxy.Close()
	if _, err := net.Dial("unix", sock); err == nil {
		t.Error("the second session still listens after Proxy.Close")
	}
	if _, err := e.proxy.Open(context.Background(), Policy{AllowedDomains: []string{"other.test"}}); err != ErrClosed {
		t.Errorf("Open after Close: %v", err)
	}
}
