package egress

import (
	"go.opentelemetry.io/otel/trace"

	"context"
	"crypto/tls"
	"errors"
	"fmt"
	"net"
	"sort"
	"strings"
	"sync"
	"sync/atomic"

	"github.com/prometheus/client_golang/prometheus"
	"go.uber.org/zap"
)

// Proxy holds the operator's bound and the metrics; each sandbox gets its
// own Session from Open.
type Proxy struct {
	cfg      Config
	operator map[string]bool
	log      *zap.Logger
	m        *metrics
	ids      atomic.Uint64

	mu       sync.Mutex
	closed   bool
	sessions map[*Session]struct{}
}

// ErrClosed is returned by Open after Close.
var ErrClosed = errors.New("egress: proxy closed")

// New checks cfg and registers the metrics on reg (nil: not registered).
func New(cfg Config, log *zap.Logger, reg prometheus.Registerer) (*Proxy, error) {
	if log == nil {
		log = zap.NewNop()
	}
	cfg = cfg.withDefaults()
	operator := map[string]bool{}
	for i, d := range cfg.AllowedDomains {
		h := normHost(strings.TrimSpace(d))
		if p := hostProblem(h); p != "" {
			return nil, fmt.Errorf("egress: allowed_domains[%d] %q %s", i, d, p)
		}
		operator[h] = true
	}
	resolve := make(map[string]string, len(cfg.Resolve))
	for name, to := range cfg.Resolve {
		h := normHost(name)
		if p := hostProblem(h); p != "" {
			return nil, fmt.Errorf("egress: resolve key %q %s", name, p)
		}
		if to == "" {
			return nil, fmt.Errorf("egress: resolve %q: empty destination", name)
		}
		if _, _, err := net.SplitHostPort(to); err != nil && strings.Contains(to, ":") && net.ParseIP(to) == nil {
			return nil, fmt.Errorf("egress: resolve %q: %q is neither host nor host:port: %w", name, to, err)
		}
		resolve[h] = to
	}
	cfg.Resolve = resolve
	m, err := newMetrics(reg)
	if err != nil {
		return nil, fmt.Errorf("egress: metrics: %w", err)
	}
	return &Proxy{cfg: cfg, operator: operator, log: log, m: m, sessions: map[*Session]struct{}{}}, nil
}

// Enabled reports whether the operator allows any domain at all; when not,
// callers keep refusing network policies other than disabled.
func (p *Proxy) Enabled() bool { return len(p.operator) > 0 }

// Check validates pol against the operator's bound without side effects:
// nil, or a *PolicyError naming the offending field.
func (p *Proxy) Check(pol Policy) error {
	_, err := p.cfg.check(pol, p.operator)
	return err
}

// Open checks pol and starts a session with its own budgets (and, when the
// policy has secrets, its own CA). The caller serves it on listeners and
// closes it with the sandbox. ctx carries values only: the session lives
// until Session.Close or Proxy.Close, not until ctx is done.
func (p *Proxy) Open(ctx context.Context, pol Policy) (*Session, error) {
	norm, err := p.cfg.check(pol, p.operator)
	if err != nil {
		return nil, err
	}
	s := &Session{
		p:            p,
		cfg:          &p.cfg,
		traceParent:  trace.SpanContextFromContext(ctx),
		m:            p.m,
		allowed:      map[string]bool{},
		secrets:      map[string][]Secret{},
		placeholders: map[string]string{},
		conns:        map[net.Conn]struct{}{},
		listeners:    map[net.Listener]struct{}{},
		leaves:       map[string]*leafCert{},
	}
	s.id = p.ids.Add(1)
	s.log = p.log.With(zap.Uint64("egress_session", s.id))
	s.ctx, s.cancel = context.WithCancel(context.WithoutCancel(ctx))
	for _, d := range norm.AllowedDomains {
		s.allowed[d] = true
	}
	for _, sec := range norm.Secrets {
		s.secrets[sec.Domain] = append(s.secrets[sec.Domain], sec)
		s.placeholders[sec.Name] = placeholder(sec.Name)
	}
	s.echoes = map[string][]echoPattern{}
	for d, list := range s.secrets {
		s.echoes[d] = echoPatterns(list)
	}
	if len(s.secrets) > 0 {
		domains := make([]string, 0, len(s.secrets))
		for d := range s.secrets {
			domains = append(domains, d)
		}
		sort.Strings(domains)
		s.tlsCache = tls.NewLRUClientSessionCache(len(domains) * 4)
		if s.ca, err = newCA(domains); err != nil {
			s.cancel()
			return nil, fmt.Errorf("egress: session CA: %w", err)
		}
	}
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.closed {
		s.cancel()
		return nil, ErrClosed
	}
	p.sessions[s] = struct{}{}
	s.log.Info("egress session opened", zap.Strings("allowed_domains", norm.AllowedDomains), zap.Int("secrets", len(norm.Secrets)))
	return s, nil
}

// Close closes every session still open; Open fails afterwards.
func (p *Proxy) Close() error {
	p.mu.Lock()
	p.closed = true
	sessions := make([]*Session, 0, len(p.sessions))
	for s := range p.sessions {
		sessions = append(sessions, s)
	}
	p.mu.Unlock()
	for _, s := range sessions {
		s.Close()
	}
	return nil
}

func (p *Proxy) forget(s *Session) {
	p.mu.Lock()
	delete(p.sessions, s)
	p.mu.Unlock()
}

// placeholder is the text the code writes where it wants a secret.
func placeholder(name string) string { return "$" + name }
