package egress

import (
	"context"
	"crypto/tls"
	"crypto/x509"
	"io"
	"net"
	"net/http"
	"slices"
	"testing"
	"time"
)

// BenchmarkEgressAddedLatency measures an allowed HTTPS GET three ways,
// interleaved in one loop so the machine's noise hits all alike: straight
// from the host to the origin (the baseline), through the proxy's tunnel,
// and through the proxy terminating TLS (a domain with a secret, the
// header substituted). It reports the baseline's median and each path's
// added median. new-connection: every GET opens its own connection (TCP,
// CONNECT, TLS: what a fresh pip or curl pays); keep-alive: one
// connection reused (what the proxy adds per request once it is open).
func BenchmarkEgressAddedLatency(b *testing.B) {
	for _, mode := range []struct {
		name      string
		keepAlive bool
	}{{"new-connection", false}, {"keep-alive", true}} {
		b.Run(mode.name, func(b *testing.B) {
			e := newEnv(b, func(c *Config, _ *Policy) { c.MaxConns = 1 << 30; c.MaxBytes = 1 << 50; c.IdleTimeout = time.Minute })
			direct := &http.Client{Transport: &http.Transport{
				DialContext: func(ctx context.Context, _, _ string) (net.Conn, error) {
					var d net.Dialer
					return d.DialContext(ctx, "tcp", e.tlsAddr)
				},
				TLSClientConfig:   &tls.Config{RootCAs: e.ca.pool},
				DisableKeepAlives: !mode.keepAlive,
			}}
			proxied := e.client()
			proxied.Transport.(*http.Transport).DisableKeepAlives = !mode.keepAlive
			pool := x509.NewCertPool()
			pool.AppendCertsFromPEM(e.sess.CACertPEM())
			paths := []struct {
				c   *http.Client
				url string
				hdr string
				d   []time.Duration
			}{
				{c: direct, url: "https://allowed.test/"},
				{c: proxied, url: "https://allowed.test/"},
				{c: proxied, url: "https://secret.test/", hdr: "Bearer $API_KEY"},
			}
			get := func(i int) {
				p := &paths[i]
				req, _ := http.NewRequest("GET", p.url, nil)
				if p.hdr != "" {
					req.Header.Set("Authorization", p.hdr)
				}
				t0 := time.Now()
				resp, err := p.c.Do(req)
				if err != nil {
					b.Fatal(err)
				}
				io.Copy(io.Discard, resp.Body)
				resp.Body.Close()
				if resp.StatusCode != 200 {
					b.Fatalf("%s: %d", p.url, resp.StatusCode)
				}
				p.d = append(p.d, time.Since(t0))
			}
			for i := range paths { // warm: leaf certificate, pools
				get(i)
				paths[i].d = nil
			}
			b.ResetTimer()
			for n := 0; n < b.N; n++ {
				for i := range paths {
					get((i + n) % len(paths)) // rotate the order too
				}
			}
			b.StopTimer()
			med := func(d []time.Duration) float64 {
				slices.Sort(d)
				return float64(d[len(d)/2].Nanoseconds()) / 1e3
			}
			base := med(paths[0].d)
			b.ReportMetric(base, "direct-median-µs")
			b.ReportMetric(med(paths[1].d)-base, "tunnel-added-median-µs")
			b.ReportMetric(med(paths[2].d)-base, "terminated-added-median-µs")
		})
	}
}
