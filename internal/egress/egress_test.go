package egress

import (
	"crypto/tls"
	"io"
	"net"
	"net/http"
	"strings"
	"testing"
)

func TestAllowedThroughTunnelAndPlainHTTP(t *testing.T) {
	e := newEnv(t)
	for _, tc := range []struct {
		name, url, want, reason string
	}{
		{"https tunnel", "https://allowed.test/", "hello from allowed.test", reasonTunnel},
		{"https tunnel, case and trailing dot", "https://ALLOWED.test./", "hello from ALLOWED.test.", reasonTunnel},
		{"plain http", "http://plain.test/", "hello from plain.test", reasonHTTP},
		{"plain http, explicit port 80", "http://plain.test:80/", "hello from plain.test", reasonHTTP},
		{"https terminated (domain with secrets)", "https://secret.test/", "hello from secret.test", reasonTerminated},
	} {
		t.Run(tc.name, func(t *testing.T) {
			before := e.counter("allowed", tc.reason)
			code, body, _, err := e.get(tc.url)
			if err != nil || code != 200 || body != tc.want {
				t.Fatalf("GET %s = %d %q, %v; want 200 %q", tc.url, code, body, err, tc.want)
			}
			if got := e.counter("allowed", tc.reason) - before; got != 1 {
				t.Errorf("allowed{%s} went up by %v, want 1", tc.reason, got)
			}
		})
	}
	// The TLS of a tunnel is end to end: the client saw the origin's own
	// certificate, not one from the session CA.
	c := e.client()
	resp, err := c.Get("https://allowed.test/")
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	if issuer := resp.TLS.PeerCertificates[0].Issuer.CommonName; issuer != "egress test origins CA" {
		t.Errorf("tunnel: certificate issued by %q, want the origin's CA", issuer)
	}
	resp, err = c.Get("https://secret.test/")
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	if issuer := resp.TLS.PeerCertificates[0].Issuer.CommonName; issuer != "codeinterp egress session CA" {
		t.Errorf("terminated: certificate issued by %q, want the session CA", issuer)
	}
}

func TestKeepAliveThroughTerminatedTunnel(t *testing.T) {
	e := newEnv(t)
	c := e.client()
	c.Transport.(*http.Transport).DisableKeepAlives = false
	for i := 0; i < 5; i++ {
		resp, err := c.Get("https://secret.test/headers")
		if err != nil {
			t.Fatal(err)
		}
		io.Copy(io.Discard, resp.Body)
		resp.Body.Close()
	}
	if got := e.counter("allowed", reasonTerminated); got != 1 {
		t.Errorf("5 requests on one keep-alive connection made %v tunnels, want 1", got)
	}
}

func TestRefusals(t *testing.T) {
	e := newEnv(t)
	for _, tc := range []struct {
		name, req string
		status    int
		reason    string
	}{
		{"connect ipv4", "CONNECT 127.0.0.1:443 HTTP/1.1\r\nHost: 127.0.0.1:443\r\n\r\n", 403, reasonIPLiteral},
		{"connect ipv6", "CONNECT [::1]:443 HTTP/1.1\r\nHost: [::1]:443\r\n\r\n", 403, reasonIPLiteral},
		{"connect v4-mapped v6", "CONNECT [::ffff:127.0.0.1]:443 HTTP/1.1\r\n\r\n", 403, reasonIPLiteral},
		{"connect short dotted", "CONNECT 127.1:443 HTTP/1.1\r\n\r\n", 403, reasonIPLiteral},
		{"connect hex dotted", "CONNECT 0x7f.1:443 HTTP/1.1\r\n\r\n", 403, reasonIPLiteral},
		{"http decimal", "GET http://2130706433/ HTTP/1.1\r\nHost: 2130706433\r\n\r\n", 403, reasonIPLiteral},
		{"http hex", "GET http://0x7f000001/ HTTP/1.1\r\nHost: 0x7f000001\r\n\r\n", 403, reasonIPLiteral},
		{"http octal", "GET http://017700000001/ HTTP/1.1\r\nHost: 017700000001\r\n\r\n", 403, reasonIPLiteral},
		{"http dotted v4", "GET http://127.0.0.1/ HTTP/1.1\r\nHost: 127.0.0.1\r\n\r\n", 403, reasonIPLiteral},
		{"http bracketed v6", "GET http://[::1]/ HTTP/1.1\r\nHost: [::1]\r\n\r\n", 403, reasonIPLiteral},
		{"http v6 with zone", "GET http://[fe80::1%25eth0]/ HTTP/1.1\r\n\r\n", 403, reasonIPLiteral},
		{"subdomain trick", "CONNECT allowed.test.evil.test:443 HTTP/1.1\r\n\r\n", 403, reasonNotAllowed},
		{"subdomain of an allowed name", "CONNECT www.allowed.test:443 HTTP/1.1\r\n\r\n", 403, reasonNotAllowed},
		{"off-list name with an origin", "CONNECT evil.test:443 HTTP/1.1\r\n\r\n", 403, reasonNotAllowed},
		{"off-list plain http", "GET http://evil.test/ HTTP/1.1\r\nHost: evil.test\r\n\r\n", 403, reasonNotAllowed},
		{"connect wrong port", "CONNECT allowed.test:8443 HTTP/1.1\r\n\r\n", 403, reasonBadPort},
		{"connect port 80", "CONNECT plain.test:80 HTTP/1.1\r\n\r\n", 403, reasonBadPort},
		{"http wrong port", "GET http://plain.test:8080/ HTTP/1.1\r\nHost: plain.test:8080\r\n\r\n", 403, reasonBadPort},
		{"http to 443", "GET http://plain.test:443/ HTTP/1.1\r\n\r\n", 403, reasonBadPort},
		{"connect without port", "CONNECT allowed.test HTTP/1.1\r\n\r\n", 400, reasonBadRequest},
		{"origin-form request", "GET / HTTP/1.1\r\nHost: plain.test\r\n\r\n", 400, reasonBadRequest},
		{"https absolute form", "GET https://allowed.test/ HTTP/1.1\r\nHost: allowed.test\r\n\r\n", 400, reasonBadRequest},
		{"ftp absolute form", "GET ftp://allowed.test/ HTTP/1.1\r\n\r\n", 400, reasonBadRequest},
		{"underscore host", "CONNECT bad_host.test:443 HTTP/1.1\r\n\r\n", 403, reasonBadHost},
		{"header too large", "GET http://plain.test/ HTTP/1.1\r\nHost: plain.test\r\nX-Big: " + strings.Repeat("a", 100<<10) + "\r\n\r\n", 431, reasonHeaderTooLarge},
		{"dns to loopback", "CONNECT loop.test:443 HTTP/1.1\r\n\r\n", 403, reasonPrivateAddress},
		{"dns to metadata link-local", "GET http://meta.test/ HTTP/1.1\r\n\r\n", 403, reasonPrivateAddress},
		{"dns mixed public and private", "CONNECT mixed.test:443 HTTP/1.1\r\n\r\n", 403, reasonPrivateAddress},
		{"dns v6 loopback", "CONNECT v6loop.test:443 HTTP/1.1\r\n\r\n", 403, reasonPrivateAddress},
		{"dns v4-mapped loopback", "CONNECT mapped.test:443 HTTP/1.1\r\n\r\n", 403, reasonPrivateAddress},
		{"dns nxdomain", "CONNECT slow.test:443 HTTP/1.1\r\n\r\n", 502, reasonResolveFailed},
	} {
		t.Run(tc.name, func(t *testing.T) {
			e.dns.set("loop.test", func(int) []net.IP { return []net.IP{net.ParseIP("127.0.0.1")} })
			e.dns.set("meta.test", func(int) []net.IP { return []net.IP{net.ParseIP("169.254.169.254")} })
			e.dns.set("mixed.test", func(int) []net.IP { return []net.IP{net.ParseIP("192.0.2.1"), net.ParseIP("10.1.2.3")} })
			e.dns.set("v6loop.test", func(int) []net.IP { return []net.IP{net.ParseIP("::1")} })
			e.dns.set("mapped.test", func(int) []net.IP { return []net.IP{net.ParseIP("::ffff:127.0.0.1")} })
			before := e.counter("refused", tc.reason)
			originsBefore := e.tlsSeen.count() + e.httpSeen.count()
			got := e.raw(tc.req)
			code, reason := status(t, got)
			if code != tc.status || reason != tc.reason {
				t.Fatalf("got %d %q, want %d %q; answer %q", code, reason, tc.status, tc.reason, got)
			}
			if !strings.Contains(got, "egress proxy: ") {
				t.Errorf("no one-line reason in %q", got)
			}
			if d := e.counter("refused", tc.reason) - before; d != 1 {
				t.Errorf("refused{%s} went up by %v, want 1", tc.reason, d)
			}
			if n := e.tlsSeen.count() + e.httpSeen.count(); n != originsBefore {
				t.Errorf("an origin was reached")
			}
		})
	}
}

// TestSNIMustMatchConnect: the tunnel's ClientHello must name the CONNECT
// target; a tunnel opened to an allowed name cannot carry TLS to another.
func TestSNIMustMatchConnect(t *testing.T) {
	e := newEnv(t)
	for _, tc := range []struct {
		name, connect, sni, reason string
	}{
		{"sni of an off-list domain", "allowed.test", "evil.test", reasonSNIMismatch},
		{"sni of another allowed domain", "allowed.test", "other.test", reasonSNIMismatch},
		{"no sni", "allowed.test", "", reasonSNIMissing},
		{"sni mismatch on a terminated domain", "secret.test", "evil.test", reasonSNIMismatch},
	} {
		t.Run(tc.name, func(t *testing.T) {
			before := e.counter("refused", tc.reason)
			originsBefore := e.tlsSeen.count()
			c, err := net.Dial("unix", e.sock)
			if err != nil {
				t.Fatal(err)
			}
			defer c.Close()
			io.WriteString(c, "CONNECT "+tc.connect+":443 HTTP/1.1\r\n\r\n")
			buf := make([]byte, len("HTTP/1.1 200 Connection established\r\n\r\n"))
			if _, err := io.ReadFull(c, buf); err != nil || !strings.HasPrefix(string(buf), "HTTP/1.1 200") {
				t.Fatalf("CONNECT: %q %v", buf, err)
			}
			cfg := &tls.Config{ServerName: tc.sni, RootCAs: e.ca.pool}
			if tc.sni == "" {
				cfg.InsecureSkipVerify = true // Go sends no SNI without a name
			}
			tc2 := tls.Client(c, cfg)
			if err := tc2.Handshake(); err == nil {
				t.Fatal("handshake succeeded")
			}
			if d := e.counter("refused", tc.reason) - before; d != 1 {
				t.Errorf("refused{%s} went up by %v, want 1", tc.reason, d)
			}
			if e.tlsSeen.count() != originsBefore {
				t.Error("the origin got a request")
			}
		})
	}
	t.Run("not tls at all", func(t *testing.T) {
		got := e.raw("CONNECT allowed.test:443 HTTP/1.1\r\n\r\nGET / HTTP/1.1\r\nHost: allowed.test\r\n\r\n")
		if got != "HTTP/1.1 200 Connection established\r\n\r\n" {
			t.Errorf("got %q; want only the 200 and a close", got)
		}
	})
}
