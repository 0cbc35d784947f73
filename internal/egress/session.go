package egress

import (
	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/trace"

	"bufio"
	"context"
	"crypto/tls"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"go.uber.org/zap"
)

// A Session is one sandbox's proxy: an HTTP proxy (CONNECT for https,
// absolute-form for http) served on listeners the caller gives it,
// typically a unix socket the sandbox reaches.
type Session struct {
	p   *Proxy
	cfg *Config
	m   *metrics
	log *zap.Logger
	id  uint64
	// traceParent is the span of the request that opened the session
	// (invalid without tracing): connection spans go under it.
	traceParent trace.SpanContext

	allowed      map[string]bool
	secrets      map[string][]Secret      // domain -> its secrets
	echoes       map[string][]echoPattern // domain -> its secrets' spellings to take out of its responses
	placeholders map[string]string
	ca           *sessionCA             // nil without secrets
	tlsCache     tls.ClientSessionCache // to the origins it terminates for

	bytesUsed atomic.Int64
	connsUsed atomic.Int64
	open      atomic.Int64

	ctx    context.Context
	cancel context.CancelFunc

	mu        sync.Mutex
	closed    bool
	conns     map[net.Conn]struct{}
	listeners map[net.Listener]struct{}
	leaves    map[string]*leafCert
	wg        sync.WaitGroup
}

// Serve accepts the sandbox's connections on l until l or the session is
// closed; after Close it returns nil.
func (s *Session) Serve(l net.Listener) error {
	s.mu.Lock()
	if s.closed {
		s.mu.Unlock()
		l.Close()
		return nil
	}
	s.listeners[l] = struct{}{}
	s.mu.Unlock()
	defer func() {
		s.mu.Lock()
		delete(s.listeners, l)
		s.mu.Unlock()
	}()
	var backoff time.Duration
	for {
		raw, err := l.Accept()
		if err != nil {
			if s.ctx.Err() != nil {
				return nil
			}
			if errors.Is(err, net.ErrClosed) {
				return fmt.Errorf("egress: accept: %w", err)
			}
			// Out of descriptors or the like: back off as net/http does
			// rather than end the sandbox's network.
			s.log.Warn("egress accept", zap.Error(err))
			backoff = min(max(2*backoff, 5*time.Millisecond), time.Second)
			select {
			case <-time.After(backoff):
			case <-s.ctx.Done():
				return nil
			}
			continue
		}
		backoff = 0
		act := newActivity()
		c := &meteredConn{Conn: raw, s: s, act: act, client: true}
		if !s.trackHandler(c) {
			raw.Close()
			return nil
		}
		go func() {
			defer s.wg.Done()
			defer s.untrack(c)
			defer c.Close()
			if n := s.open.Add(1); n > int64(s.cfg.MaxConcurrent) {
				s.open.Add(-1)
				s.refuse(c, c, "", &refusal{reasonConcurrency, 429, fmt.Sprintf("more than %d connections open at once", s.cfg.MaxConcurrent)})
				return
			}
			defer s.open.Add(-1)
			s.handle(c)
		}()
	}
}

// ListenUnix creates a unix socket at path, mode 0666 so a sandbox's uid
// can connect; Serve it yourself. A stale socket file is replaced.
func (s *Session) ListenUnix(path string) (net.Listener, error) {
	if fi, err := os.Lstat(path); err == nil && fi.Mode()&os.ModeSocket != 0 {
		os.Remove(path)
	}
	l, err := net.Listen("unix", path)
	if err != nil {
		return nil, fmt.Errorf("egress: listen %s: %w", path, err)
	}
	if err := os.Chmod(path, 0o666); err != nil {
		l.Close()
		return nil, fmt.Errorf("egress: chmod %s: %w", path, err)
	}
	return l, nil
}

// CACertPEM is the CA the sandbox must trust for the domains with secrets
// (the proxy terminates TLS to those); nil if the policy has none.
func (s *Session) CACertPEM() []byte {
	if s.ca == nil {
		return nil
	}
	return append([]byte(nil), s.ca.certPEM...)
}

// Placeholders maps each secret's name to the text the code sees and
// writes in a header where it wants the value ("API_KEY" -> "$API_KEY").
func (s *Session) Placeholders() map[string]string {
	out := make(map[string]string, len(s.placeholders))
	for k, v := range s.placeholders {
		out[k] = v
	}
	return out
}

// Close stops the listeners and ends every connection of the session
// (both sides) at once; it waits for their goroutines.
func (s *Session) Close() error {
	s.mu.Lock()
	if s.closed {
		s.mu.Unlock()
		s.wg.Wait()
		return nil
	}
	s.closed = true
	s.cancel()
	for l := range s.listeners {
		l.Close()
	}
	for c := range s.conns {
		c.Close()
	}
	s.mu.Unlock()
	s.wg.Wait()
	s.p.forget(s)
	s.log.Info("egress session closed", zap.Int64("bytes", s.bytesUsed.Load()), zap.Int64("connections", s.connsUsed.Load()))
	return nil
}

func (s *Session) track(c net.Conn) bool {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.closed {
		return false
	}
	s.conns[c] = struct{}{}
	return true
}

// trackHandler tracks a sandbox connection and counts its goroutine in
// wg under the same lock Close takes, so Close never waits before an Add.
func (s *Session) trackHandler(c net.Conn) bool {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.closed {
		return false
	}
	s.conns[c] = struct{}{}
	s.wg.Add(1)
	return true
}

func (s *Session) untrack(c net.Conn) {
	s.mu.Lock()
	delete(s.conns, c)
	s.mu.Unlock()
}

// BytesUsed is what the session's connections carried, both directions.
func (s *Session) BytesUsed() int64 { return s.bytesUsed.Load() }

// spend charges n bytes to the session; false once the budget is spent.
func (s *Session) spend(n int) bool {
	return s.bytesUsed.Add(int64(n)) <= s.cfg.MaxBytes
}

// cut ends a connection that overran the byte budget.
func (s *Session) cut(c *meteredConn) {
	s.m.refused(reasonByteBudget)
	s.log.Info("egress connection cut", zap.String("reason", reasonByteBudget))
	c.Conn.Close()
}

// refuse answers the sandbox's client (w, over c) with a one-line reason
// and counts it. The answer is not charged to the byte budget: a session
// whose budget is spent must still be told so.
func (s *Session) refuse(w io.Writer, c *meteredConn, host string, r *refusal) {
	c.exempt = true
	defer func() { c.exempt = false }()
	s.m.refused(r.reason)
	s.traceDecision(host, "refused", r.reason)
	s.log.Info("egress refused", zap.String("host", host), zap.String("reason", r.reason), zap.String("detail", r.msg))
	body := "egress proxy: " + r.msg + "\n"
	fmt.Fprintf(w, "HTTP/1.1 %d %s\r\nContent-Type: text/plain; charset=utf-8\r\nContent-Length: %d\r\nConnection: close\r\nX-Codeinterp-Egress-Refused: %s\r\n\r\n%s",
		r.status, http.StatusText(r.status), len(body), r.reason, body)
}

func (s *Session) allow(host, reason string) {
	s.m.allowed(reason)
	s.traceDecision(host, "allowed", reason)
	s.log.Info("egress allowed", zap.String("host", host), zap.String("mode", reason))
}

// traceDecision records one connection's decision as a span (the host and
// the reason's code; never a header, a path or a secret).
func (s *Session) traceDecision(host, result, reason string) {
	if s.cfg.Tracer == nil || !s.traceParent.IsValid() {
		return
	}
	_, span := s.cfg.Tracer.Start(trace.ContextWithSpanContext(context.Background(), s.traceParent), "egress "+host,
		trace.WithSpanKind(trace.SpanKindClient), trace.WithAttributes(attribute.String("server.address", host),
			attribute.String("codeinterp.egress.result", result), attribute.String("codeinterp.egress.reason", reason)))
	span.End()
}

// authorise says whether host (as the client spelled it) may be reached by
// this session, and under which normalised name.
func (s *Session) authorise(raw string) (string, *refusal) {
	h := normHost(raw)
	if isIPLiteral(h) {
		return h, &refusal{reasonIPLiteral, 403, fmt.Sprintf("%s is an IP address; only the allowed domains may be reached, by name", raw)}
	}
	if p := hostProblem(h); p != "" {
		return h, &refusal{reasonBadHost, 403, fmt.Sprintf("%q %s", raw, p)}
	}
	if !s.allowed[h] {
		return h, &refusal{reasonNotAllowed, 403, fmt.Sprintf("%s is not in this session's allowed domains", h)}
	}
	return h, nil
}

// budget refuses a new egress connection once MaxConns or MaxBytes is spent.
func (s *Session) budget() *refusal {
	if s.bytesUsed.Load() >= s.cfg.MaxBytes {
		return &refusal{reasonByteBudget, 429, fmt.Sprintf("this session's byte budget (%d bytes) is spent", s.cfg.MaxBytes)}
	}
	if s.connsUsed.Add(1) > int64(s.cfg.MaxConns) {
		return &refusal{reasonConnBudget, 429, fmt.Sprintf("this session's connection budget (%d connections) is spent", s.cfg.MaxConns)}
	}
	return nil
}

func (s *Session) dial(ctx context.Context, host, addr string, act *activity) (*meteredConn, *refusal) {
	d := net.Dialer{Timeout: s.cfg.DialTimeout}
	raw, err := d.DialContext(ctx, "tcp", addr)
	if err != nil {
		var ne net.Error
		if errors.As(err, &ne) && ne.Timeout() {
			return nil, &refusal{reasonDialFailed, 504, fmt.Sprintf("%s did not answer within %s", host, s.cfg.DialTimeout)}
		}
		return nil, &refusal{reasonDialFailed, 502, fmt.Sprintf("cannot connect to %s", host)}
	}
	c := &meteredConn{Conn: raw, s: s, act: act}
	if !s.track(c) {
		raw.Close()
		return nil, &refusal{reasonClosed, 502, "the session is closed"}
	}
	return c, nil
}

func (s *Session) closeUpstream(c *meteredConn) {
	if c != nil {
		c.Close()
		s.untrack(c)
	}
}

// reader is a connection's buffered reader with the header-size limit
// under it.
type reader struct {
	lim *headerLimiter
	br  *bufio.Reader
	got int // bytes the last header read consumed or had buffered
}

func newReader(r io.Reader) *reader {
	lim := &headerLimiter{r: r, n: -1}
	return &reader{lim: lim, br: bufio.NewReader(lim)}
}

// started says whether the last header read got any byte: a keep-alive
// connection that simply stays quiet until IdleTimeout is closed without
// an answer and without counting a refusal.
func (r *reader) started() bool { return r.got > 0 }

// readHeader runs read with the header bounds in force: at most
// MaxHeaderBytes, and all of it within IdleTimeout (a client or origin
// that sends a byte at a time does not hold the connection).
func readHeader[T any](s *Session, c *meteredConn, r *reader, read func(*bufio.Reader) (T, error)) (T, error) {
	r.lim.n = s.cfg.MaxHeaderBytes
	buffered := r.br.Buffered()
	c.fixedRead = time.Now().Add(s.cfg.IdleTimeout)
	v, err := read(r.br)
	c.fixedRead = time.Time{}
	r.got = buffered + s.cfg.MaxHeaderBytes - r.lim.n
	r.lim.n = -1
	return v, err
}

// headerRefusal is the answer to a failed header read, or nil when the
// peer just went away.
func headerRefusal(err error) *refusal {
	switch {
	case errors.Is(err, errHeaderTooLarge):
		return &refusal{reasonHeaderTooLarge, 431, "the request's header block is too large"}
	case errors.Is(err, os.ErrDeadlineExceeded):
		return &refusal{reasonTimeout, 408, "the request's headers did not arrive in time"}
	case errors.Is(err, io.EOF), errors.Is(err, net.ErrClosed), errors.Is(err, errByteBudget), errors.Is(err, io.ErrUnexpectedEOF):
		return nil
	}
	return &refusal{reasonBadRequest, 400, "malformed request"}
}

// handle serves one connection from the sandbox: plain-HTTP requests in a
// keep-alive loop, or one CONNECT that takes the connection over.
func (s *Session) handle(c *meteredConn) {
	r := newReader(c)
	for {
		req, err := readHeader(s, c, r, http.ReadRequest)
		if err != nil {
			if rf := headerRefusal(err); rf != nil && r.started() {
				s.refuse(c, c, "", rf)
			}
			return
		}
		if req.Method == http.MethodConnect {
			s.connect(c, r, req)
			return
		}
		if !s.forwardHTTP(c, req) {
			return
		}
	}
}

// connect serves CONNECT host:443: it refuses what the policy does not
// allow before answering 200, then checks the ClientHello's server name
// against the CONNECT target and either splices the bytes (TLS end to end)
// or, for a domain with secrets, terminates TLS to rewrite headers.
func (s *Session) connect(c *meteredConn, r *reader, req *http.Request) {
	hostport := req.Host
	if hostport == "" {
		hostport = req.URL.Host
	}
	rawHost, port, err := net.SplitHostPort(hostport)
	if err != nil {
		s.refuse(c, c, "", &refusal{reasonBadRequest, 400, "CONNECT needs host:443"})
		return
	}
	host, rf := s.authorise(rawHost)
	if rf == nil && port != "443" {
		rf = &refusal{reasonBadPort, 403, fmt.Sprintf("CONNECT is allowed to port 443 only, not %s", port)}
	}
	if rf == nil {
		rf = s.budget()
	}
	var addr string
	if rf == nil {
		addr, rf = s.resolve(s.ctx, host, "443")
	}
	var up *meteredConn
	if rf == nil {
		up, rf = s.dial(s.ctx, host, addr, c.act)
	}
	if rf != nil {
		s.refuse(c, c, host, rf)
		return
	}
	defer s.closeUpstream(up)
	if _, err := io.WriteString(c, "HTTP/1.1 200 Connection established\r\n\r\n"); err != nil {
		return
	}

	c.fixedRead = time.Now().Add(s.cfg.IdleTimeout)
	sni, ech, hello, err := peekClientHello(r.br)
	c.fixedRead = time.Time{}
	if err != nil {
		reason := reasonNotTLS
		if errors.Is(err, os.ErrDeadlineExceeded) {
			reason = reasonTimeout
		}
		s.closeRefused(host, reason, "the tunnel did not start with a TLS ClientHello")
		return
	}
	switch sni = normHost(sni); {
	case ech:
		s.closeRefused(host, reasonECH, "the ClientHello uses Encrypted Client Hello, which hides the server it reaches; refused")
		return
	case sni == "":
		s.closeRefused(host, reasonSNIMissing, "the ClientHello names no server (SNI); refused")
		return
	case sni != host:
		s.closeRefused(host, reasonSNIMismatch, fmt.Sprintf("the ClientHello names %q, not the CONNECT target", sni))
		return
	}
	client := io.MultiReader(strings.NewReader(string(hello)), r.br)
	if len(s.secrets[host]) > 0 {
		s.allow(host, reasonTerminated)
		s.terminate(c, client, up, host, addr)
		return
	}
	s.allow(host, reasonTunnel)
	if _, err := up.Write(hello); err != nil {
		return
	}
	splice(c, r.br, up)
}

// closeRefused counts and logs a refusal the client can only see as a
// closed connection (the tunnel is already established).
func (s *Session) closeRefused(host, reason, msg string) {
	s.m.refused(reason)
	s.log.Info("egress refused", zap.String("host", host), zap.String("reason", reason), zap.String("detail", msg))
}

// splice copies both ways until either side ends, then ends both.
func splice(c *meteredConn, fromClient io.Reader, up *meteredConn) {
	done := make(chan struct{}, 2)
	go func() { io.Copy(up, fromClient); done <- struct{}{} }()
	go func() { io.Copy(c, up); done <- struct{}{} }()
	<-done
	c.Close()
	up.Close()
	<-done
}

// terminate finishes the client's handshake with a leaf for host signed by
// the session CA, opens TLS to the origin (verified against RootCAs), and
// relays HTTP/1.1 requests with the host's placeholders substituted.
func (s *Session) terminate(c *meteredConn, client io.Reader, up *meteredConn, host, addr string) {
	cert, err := s.leafFor(host)
	if err != nil {
		s.closeRefused(host, reasonUpstreamFailed, "cannot issue a certificate")
		return
	}
	tc := tls.Server(&replayConn{Conn: c, r: client}, &tls.Config{
		Certificates: []tls.Certificate{*cert},
		NextProtos:   []string{"http/1.1"},
		MinVersion:   tls.VersionTLS12,
	})
	c.fixedRead = time.Now().Add(s.cfg.IdleTimeout)
	err = tc.Handshake()
	c.fixedRead = time.Time{}
	if err != nil {
		if errors.Is(err, os.ErrDeadlineExceeded) {
			s.closeRefused(host, reasonTimeout, "the TLS handshake did not finish in time")
		}
		return // else the client went away or does not trust the session CA: its own error says so
	}
	o := &origin{s: s, host: host, addr: addr, act: c.act, client: c, tls: true, raw: up}
	defer func() { s.closeUpstream(o.raw) }()
	r := newReader(tc)
	for {
		req, err := readHeader(s, c, r, http.ReadRequest)
		if err != nil {
			if rf := headerRefusal(err); rf != nil && r.started() {
				s.refuse(tc, c, host, rf)
			}
			return
		}
		if !s.relayTerminated(tc, req, o) {
			return
		}
	}
}

func (s *Session) leafFor(host string) (*tls.Certificate, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if l, ok := s.leaves[host]; ok {
		return l.cert, nil
	}
	cert, err := s.ca.leaf(host)
	if err != nil {
		return nil, err
	}
	s.leaves[host] = &leafCert{cert: cert}
	return cert, nil
}
