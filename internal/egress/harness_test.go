package egress

import (
	"go.opentelemetry.io/otel/trace"

	"bufio"
	"bytes"
	"compress/gzip"
	"context"
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/tls"
	"crypto/x509"
	"crypto/x509/pkix"
	"encoding/binary"
	"encoding/json"
	"encoding/pem"
	"fmt"
	"io"
	"math/big"
	"net"
	"net/http"
	"net/http/httptest"
	"net/url"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/testutil"
	"go.uber.org/zap"
	"go.uber.org/zap/zapcore"
)

// testCA is the origins' CA: the proxy verifies origins against it
// (Config.RootCAs), and clients that tunnel verify them with it too.
type testCA struct {
	cert *x509.Certificate
	key  *ecdsa.PrivateKey
	pool *x509.CertPool
	pem  []byte
}

func newTestCA(t testing.TB) *testCA {
	t.Helper()
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		t.Fatal(err)
	}
	tmpl := &x509.Certificate{
		SerialNumber: big.NewInt(1), Subject: pkix.Name{CommonName: "egress test origins CA"},
		NotBefore: time.Now().Add(-time.Hour), NotAfter: time.Now().Add(time.Hour),
		IsCA: true, BasicConstraintsValid: true, KeyUsage: x509.KeyUsageCertSign,
	}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, tmpl, &key.PublicKey, key)
	if err != nil {
		t.Fatal(err)
	}
	cert, _ := x509.ParseCertificate(der)
	pool := x509.NewCertPool()
	pool.AddCert(cert)
	return &testCA{cert: cert, key: key, pool: pool, pem: pemCert(der)}
}

func pemCert(der []byte) []byte {
	return pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: der})
}

func (ca *testCA) leaf(t testing.TB, names ...string) tls.Certificate {
	t.Helper()
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		t.Fatal(err)
	}
	tmpl := &x509.Certificate{
		SerialNumber: big.NewInt(time.Now().UnixNano()), Subject: pkix.Name{CommonName: names[0]},
		DNSNames: names, NotBefore: time.Now().Add(-time.Hour), NotAfter: time.Now().Add(time.Hour),
		KeyUsage: x509.KeyUsageDigitalSignature, ExtKeyUsage: []x509.ExtKeyUsage{x509.ExtKeyUsageServerAuth},
	}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, ca.cert, &key.PublicKey, ca.key)
	if err != nil {
		t.Fatal(err)
	}
	return tls.Certificate{Certificate: [][]byte{der}, PrivateKey: key}
}

// seen is what an origin received: the proxy's tests assert on it.
type seen struct {
	mu   sync.Mutex
	reqs []*http.Request
}

func (s *seen) add(r *http.Request) {
	s.mu.Lock()
	s.reqs = append(s.reqs, r)
	s.mu.Unlock()
}

// forHost is the last request an origin got for host.
func (s *seen) forHost(host string) *http.Request {
	s.mu.Lock()
	defer s.mu.Unlock()
	for i := len(s.reqs) - 1; i >= 0; i-- {
		if s.reqs[i].Host == host {
			return s.reqs[i]
		}
	}
	return nil
}

func (s *seen) count() int {
	s.mu.Lock()
	defer s.mu.Unlock()
	return len(s.reqs)
}

func (s *seen) last() *http.Request {
	s.mu.Lock()
	defer s.mu.Unlock()
	if len(s.reqs) == 0 {
		return nil
	}
	return s.reqs[len(s.reqs)-1]
}

// originHandler serves the paths the tests use on every origin.
func originHandler(rec *seen, release <-chan struct{}) http.Handler {
	mux := http.NewServeMux()
	mux.HandleFunc("/", func(w http.ResponseWriter, r *http.Request) {
		if r.URL.Path == "/echo" {
			// the body's length and start, recorded as headers on the copy the test reads
			b, _ := io.ReadAll(r.Body)
			r.Header.Set("X-Body-Len", strconv.Itoa(len(b)))
			r.Header.Set("X-Body", string(b[:min(64, len(b))]))
			w.Write(b)
		}
		rec.add(r)
		switch r.URL.Path {
		case "/echo":
		case "/echo-header":
			w.Header().Set("X-Echo", "you sent "+r.Header.Get("Authorization"))
		case "/echo-json":
			// like httpbin.org/headers: the request headers as JSON
			json.NewEncoder(w).Encode(map[string]any{"headers": map[string]string{"Authorization": r.Header.Get("Authorization")}})
		case "/echo-gzip":
			// gzip whatever the request asked for (an origin that ignores Accept-Encoding)
			w.Header().Set("Content-Encoding", "gzip")
			zw := gzip.NewWriter(w)
			fmt.Fprintf(zw, "auth=%s", r.Header.Get("Authorization"))
			zw.Close()
		case "/echo-br":
			w.Header().Set("Content-Encoding", "br")
			fmt.Fprintf(w, "auth=%s", r.Header.Get("Authorization"))
		case "/headers":
			fmt.Fprintf(w, "host=%s auth=%s x-token=%s query=%s", r.Host, r.Header.Get("Authorization"), r.Header.Get("X-Token"), r.URL.RawQuery)
		case "/redirect":
			http.Redirect(w, r, r.URL.Query().Get("to"), http.StatusFound)
		case "/big":
			n, _ := strconv.Atoi(r.URL.Query().Get("n"))
			w.Header().Set("Content-Length", strconv.Itoa(n))
			buf := bytes.Repeat([]byte("x"), 32<<10)
			for n > 0 {
				k := min(n, len(buf))
				if _, err := w.Write(buf[:k]); err != nil {
					return
				}
				n -= k
			}
		case "/stall":
			// headers out, then nothing until the test ends
			w.Header().Set("Content-Length", "100")
			w.WriteHeader(200)
			w.(http.Flusher).Flush()
			select {
			case <-release:
			case <-r.Context().Done():
			}
		default:
			fmt.Fprintf(w, "hello from %s", r.Host)
		}
	})
	return mux
}

// env is one proxy with its origins on loopback, a DNS server for the
// names the Resolve map does not cover, and a session served on a unix
// socket (and on loopback TCP, for curl).
type env struct {
	t        testing.TB
	ca       *testCA
	reg      *prometheus.Registry
	logs     *bytes.Buffer
	proxy    *Proxy
	sess     *Session
	sock     string
	tcpAddr  string
	tlsSeen  *seen // the HTTPS origin (allowed.test, secret.test, other.test, evil.test)
	httpSeen *seen // the HTTP origin (plain.test, plainsecret.test)
	tlsAddr  string
	httpAddr string
	dns      *dnsServer
	release  chan struct{}
}

const testSecret = "s3cr3t-VALUE-4f9a1c" // must never show up in logs, metrics or errors

type envOpt func(*Config, *Policy)

func newEnv(t testing.TB, opts ...envOpt) *env {
	t.Helper()
	e := &env{t: t, ca: newTestCA(t), reg: prometheus.NewRegistry(), logs: &bytes.Buffer{}, release: make(chan struct{})}
	e.tlsSeen, e.httpSeen = &seen{}, &seen{}
	ts := httptest.NewUnstartedServer(originHandler(e.tlsSeen, e.release))
	ts.TLS = &tls.Config{Certificates: []tls.Certificate{e.ca.leaf(t, "allowed.test", "secret.test", "other.test", "evil.test", "rebind.test")}}
	ts.StartTLS()
	hs := httptest.NewServer(originHandler(e.httpSeen, e.release))
	t.Cleanup(func() {
		close(e.release)
		ts.Close()
		hs.Close()
	})
	e.tlsAddr, e.httpAddr = ts.Listener.Addr().String(), hs.Listener.Addr().String()
	e.dns = startDNS(t)

	cfg := Config{
		AllowedDomains: []string{"allowed.test", "secret.test", "other.test", "plain.test", "plainsecret.test",
			"slow.test", "loop.test", "meta.test", "mixed.test", "rebind.test", "v6loop.test", "mapped.test"},
		MaxDomains: 20,
		Resolve: map[string]string{
			"allowed.test": e.tlsAddr, "secret.test": e.tlsAddr, "other.test": e.tlsAddr, "evil.test": e.tlsAddr,
			"plain.test": e.httpAddr, "plainsecret.test": e.httpAddr,
		},
		RootCAs:     e.ca.pool,
		DialTimeout: 500 * time.Millisecond,
		IdleTimeout: 400 * time.Millisecond,
		Resolver:    e.dns.resolver(),
	}
	pol := Policy{
		AllowedDomains: []string{"allowed.test", "secret.test", "other.test", "plain.test", "plainsecret.test",
			"slow.test", "loop.test", "meta.test", "mixed.test", "rebind.test", "v6loop.test", "mapped.test"},
		Secrets: []Secret{
			{Domain: "secret.test", Name: "API_KEY", Value: testSecret},
			{Domain: "plainsecret.test", Name: "PLAIN_KEY", Value: testSecret + "-plain"},
		},
	}
	for _, o := range opts {
		o(&cfg, &pol)
	}
	enc := zapcore.NewJSONEncoder(zap.NewProductionEncoderConfig())
	log := zap.New(zapcore.NewCore(enc, zapcore.AddSync(lockedWriter{w: e.logs}), zap.DebugLevel))
	p, err := New(cfg, log, e.reg)
	if err != nil {
		t.Fatal(err)
	}
	e.proxy = p
	ctx := context.Background()
	if cfg.Tracer != nil {
		// As a response's session: opened under its request's span.
		ctx = trace.ContextWithSpanContext(ctx, testParentSpan)
	}
	s, err := p.Open(ctx, pol)
	if err != nil {
		t.Fatal(err)
	}
	e.sess = s
	e.sock = filepath.Join(t.TempDir(), "egress.sock")
	l, err := s.ListenUnix(e.sock)
	if err != nil {
		t.Fatal(err)
	}
	tl, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	e.tcpAddr = tl.Addr().String()
	var wg sync.WaitGroup
	for _, l := range []net.Listener{l, tl} {
		wg.Add(1)
		go func() {
			defer wg.Done()
			if err := s.Serve(l); err != nil {
				t.Errorf("Serve: %v", err)
			}
		}()
	}
	t.Cleanup(func() {
		s.Close()
		wg.Wait()
		p.Close()
	})
	return e
}

type lockedWriter struct{ w io.Writer }

var logMu sync.Mutex

func (l lockedWriter) Write(p []byte) (int, error) {
	logMu.Lock()
	defer logMu.Unlock()
	return l.w.Write(p)
}

func (e *env) logText() string {
	logMu.Lock()
	defer logMu.Unlock()
	return e.logs.String()
}

// client is a real net/http client whose every proxy connection goes to
// the session's unix socket. It trusts the origins' CA (for tunnels) and
// the session's CA (for the domains the proxy terminates).
func (e *env) client() *http.Client {
	pool := x509.NewCertPool()
	pool.AddCert(e.ca.cert)
	if pem := e.sess.CACertPEM(); pem != nil {
		pool.AppendCertsFromPEM(pem)
	}
	return &http.Client{
		Transport: &http.Transport{
			Proxy: http.ProxyURL(&url.URL{Scheme: "http", Host: "egress.invalid:3128"}),
			DialContext: func(ctx context.Context, _, _ string) (net.Conn, error) {
				var d net.Dialer
				return d.DialContext(ctx, "unix", e.sock)
			},
			TLSClientConfig:   &tls.Config{RootCAs: pool},
			DisableKeepAlives: true,
		},
		CheckRedirect: func(*http.Request, []*http.Request) error { return http.ErrUseLastResponse },
		Timeout:       20 * time.Second,
	}
}

func (e *env) get(u string, hdr ...string) (int, string, http.Header, error) {
	req, err := http.NewRequest("GET", u, nil)
	if err != nil {
		return 0, "", nil, err
	}
	for i := 0; i+1 < len(hdr); i += 2 {
		req.Header.Set(hdr[i], hdr[i+1])
	}
	resp, err := e.client().Do(req)
	if err != nil {
		return 0, "", nil, err
	}
	defer resp.Body.Close()
	b, err := io.ReadAll(resp.Body)
	return resp.StatusCode, string(b), resp.Header, err
}

// raw sends request bytes on a fresh connection to the session and
// returns what came back until the proxy closed it (or 10 s passed,
// which the tests treat as a failure: the proxy must close).
func (e *env) raw(request string) string {
	e.t.Helper()
	c, err := net.Dial("unix", e.sock)
	if err != nil {
		e.t.Fatal(err)
	}
	defer c.Close()
	// A write error is fine: the proxy may answer and close before reading.
	io.WriteString(c, request)
	c.SetReadDeadline(time.Now().Add(10 * time.Second))
	b, err := io.ReadAll(c)
	if ne, ok := err.(net.Error); ok && ne.Timeout() {
		e.t.Fatalf("the proxy did not close the connection; got %q", b)
	}
	return string(b)
}

func (e *env) counter(result, reason string) float64 {
	return testutil.ToFloat64(e.proxy.m.conns.WithLabelValues(result, reason))
}

func (e *env) metricsText() string {
	mfs, err := e.reg.Gather()
	if err != nil {
		e.t.Fatal(err)
	}
	var b strings.Builder
	for _, mf := range mfs {
		b.WriteString(mf.String())
	}
	return b.String()
}

// dnsServer answers A and AAAA queries on loopback UDP from a table the
// test controls, so the proxy's real resolver path (net.Resolver) runs.
type dnsServer struct {
	pc      net.PacketConn
	mu      sync.Mutex
	answers map[string]func(n int) []net.IP // by name, given how many A queries came before
	queries map[string]*atomic.Int64
}

func startDNS(t testing.TB) *dnsServer {
	pc, err := net.ListenPacket("udp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	d := &dnsServer{pc: pc, answers: map[string]func(int) []net.IP{}, queries: map[string]*atomic.Int64{}}
	t.Cleanup(func() { pc.Close() })
	go d.serve()
	return d
}

func (d *dnsServer) set(name string, f func(n int) []net.IP) {
	d.mu.Lock()
	d.answers[name] = f
	d.queries[name] = &atomic.Int64{}
	d.mu.Unlock()
}

func (d *dnsServer) aQueries(name string) int64 {
	d.mu.Lock()
	defer d.mu.Unlock()
	if q := d.queries[name]; q != nil {
		return q.Load()
	}
	return 0
}

func (d *dnsServer) resolver() *net.Resolver {
	return &net.Resolver{PreferGo: true, Dial: func(ctx context.Context, _, _ string) (net.Conn, error) {
		var nd net.Dialer
		return nd.DialContext(ctx, "udp", d.pc.LocalAddr().String())
	}}
}

func (d *dnsServer) serve() {
	buf := make([]byte, 1500)
	for {
		n, from, err := d.pc.ReadFrom(buf)
		if err != nil {
			return
		}
		if resp := d.answer(buf[:n]); resp != nil {
			d.pc.WriteTo(resp, from)
		}
	}
}

// answer builds a response by hand (RFC 1035 §4): the header, the
// question echoed, and one record per address of the asked type.
func (d *dnsServer) answer(q []byte) []byte {
	if len(q) < 12 {
		return nil
	}
	i := 12
	var labels []string
	for i < len(q) && q[i] != 0 {
		l := int(q[i])
		if i+1+l > len(q) {
			return nil
		}
		labels = append(labels, strings.ToLower(string(q[i+1:i+1+l])))
		i += 1 + l
	}
	if i+5 > len(q) {
		return nil
	}
	qEnd := i + 5
	qtype := binary.BigEndian.Uint16(q[i+1:])
	name := strings.Join(labels, ".")
	d.mu.Lock()
	f, cnt := d.answers[name], d.queries[name]
	d.mu.Unlock()
	var ips []net.IP
	rcode := byte(3) // NXDOMAIN
	if f != nil {
		rcode = 0
		var k int64
		if qtype == 1 {
			k = cnt.Add(1) - 1
		} else {
			k = max(cnt.Load()-1, 0)
		}
		for _, ip := range f(int(k)) {
			if v4 := ip.To4(); qtype == 1 && v4 != nil {
				ips = append(ips, v4)
			} else if qtype == 28 && v4 == nil {
				ips = append(ips, ip.To16())
			}
		}
	}
	out := make([]byte, 12, 512)
	copy(out, q[:2])
	out[2], out[3] = 0x81, 0x80|rcode
	binary.BigEndian.PutUint16(out[4:], 1)
	binary.BigEndian.PutUint16(out[6:], uint16(len(ips)))
	out = append(out, q[12:qEnd]...)
	for _, ip := range ips {
		typ := uint16(1)
		if len(ip) == 16 {
			typ = 28
		}
		out = append(out, 0xc0, 0x0c)
		out = binary.BigEndian.AppendUint16(out, typ)
		out = binary.BigEndian.AppendUint16(out, 1)
		out = binary.BigEndian.AppendUint32(out, 0)
		out = binary.BigEndian.AppendUint16(out, uint16(len(ip)))
		out = append(out, ip...)
	}
	return out
}

// status parses the status code and refusal reason of a raw answer.
func status(t testing.TB, raw string) (int, string) {
	t.Helper()
	resp, err := http.ReadResponse(bufio.NewReader(strings.NewReader(raw)), nil)
	if err != nil {
		t.Fatalf("not an HTTP answer: %q (%v)", raw, err)
	}
	return resp.StatusCode, resp.Header.Get("X-Codeinterp-Egress-Refused")
}
