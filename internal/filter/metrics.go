package filter

import (
	"go.opentelemetry.io/otel/trace"

	"context"
	"errors"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/codeinterp/codeinterp/internal/sandbox"
)

// Outcome labels requests_total. Every stream ends with exactly one.
type Outcome string

// The request outcomes.
const (
	OutcomeNotSelected   Outcome = "not_selected"   // method/path not handled
	OutcomePassThrough   Outcome = "pass_through"   // no code_interpreter tool
	OutcomeCompleted     Outcome = "completed"      // intercepted, client got a 2xx
	OutcomeRejected      Outcome = "rejected"       // refused before upstream (4xx)
	OutcomeUpstreamError Outcome = "upstream_error" // the upstream answered non-2xx or failed
	OutcomeCancelled     Outcome = "cancelled"      // the stream ended before the reply
	OutcomeBackground    Outcome = "background"     // handed to the background runner
	OutcomeError         Outcome = "error"          // protocol or internal error
)

// Metrics are the server's Prometheus collectors. They live in the
// registry given to NewMetrics; nothing is global.
type Metrics struct {
	Requests           *prometheus.CounterVec
	CodeRuns           *prometheus.CounterVec
	RunSeconds         prometheus.Histogram
	CapacityRejections prometheus.Counter
	LoopRounds         prometheus.Histogram
	ActiveStreams      prometheus.Gauge
	reg                prometheus.Registerer
	providerRegistered bool
}

// NewMetrics creates the collectors and registers them with reg.
func NewMetrics(reg prometheus.Registerer) (*Metrics, error) {
	m := &Metrics{
		reg: reg,
		Requests: prometheus.NewCounterVec(prometheus.CounterOpts{
			Namespace: "codeinterp", Name: "requests_total",
			Help: "ext_proc streams by outcome.",
		}, []string{"outcome"}),
		CodeRuns: prometheus.NewCounterVec(prometheus.CounterOpts{
			Namespace: "codeinterp", Name: "code_runs_total",
			Help: "Sandbox runs by outcome (completed, error, timeout, memory_limit, …).",
		}, []string{"status"}),
		RunSeconds: prometheus.NewHistogram(prometheus.HistogramOpts{
			Namespace: "codeinterp", Name: "code_run_duration_seconds",
			Help:    "Wall time of one sandbox run, as seen by the server.",
			Buckets: []float64{.001, .0025, .005, .01, .025, .05, .1, .25, .5, 1, 2.5, 5, 10, 30, 60},
		}),
		CapacityRejections: prometheus.NewCounter(prometheus.CounterOpts{
			Namespace: "codeinterp", Name: "sandbox_capacity_rejections_total",
			Help: "Sessions or runs refused because no interpreter was free within the queue wait.",
		}),
		LoopRounds: prometheus.NewHistogram(prometheus.HistogramOpts{
			Namespace: "codeinterp", Name: "loop_rounds",
			Help:    "Follow-up inferences per intercepted request.",
			Buckets: []float64{0, 1, 2, 3, 4, 6, 8, 12, 16},
		}),
		ActiveStreams: prometheus.NewGauge(prometheus.GaugeOpts{
			Namespace: "codeinterp", Name: "active_streams",
			Help: "ext_proc streams open now.",
		}),
	}
	for _, c := range []prometheus.Collector{m.Requests, m.CodeRuns, m.RunSeconds, m.CapacityRejections, m.LoopRounds, m.ActiveStreams} {
		if err := reg.Register(c); err != nil {
			return nil, err
		}
	}
	for _, o := range []Outcome{OutcomeNotSelected, OutcomePassThrough, OutcomeCompleted, OutcomeRejected, OutcomeUpstreamError, OutcomeCancelled, OutcomeBackground, OutcomeError} {
		m.Requests.WithLabelValues(string(o))
	}
	return m, nil
}

// InstrumentProvider wraps p so that runs, their latency and capacity
// rejections are counted, and registers pool-size gauges that read
// p.Capacity at scrape time. Call it once per Metrics.
func (m *Metrics) InstrumentProvider(p sandbox.Provider) (sandbox.Provider, error) {
	if !m.providerRegistered {
		for _, g := range []struct {
			name, help string
			read       func(sandbox.Capacity) int
		}{
			{"sandbox_sessions_in_use", "Sandbox sessions open now.", func(c sandbox.Capacity) int { return c.InUse }},
			{"sandbox_sessions_max", "Sandbox sessions allowed at once.", func(c sandbox.Capacity) int { return c.Max }},
			{"sandbox_warm_workers", "Pre-started interpreters waiting for a session.", func(c sandbox.Capacity) int { return c.Warm }},
		} {
			read := g.read
			gf := prometheus.NewGaugeFunc(prometheus.GaugeOpts{Namespace: "codeinterp", Name: g.name, Help: g.help},
				func() float64 { return float64(read(p.Capacity())) })
			if err := m.reg.Register(gf); err != nil {
				return nil, err
			}
		}
		m.providerRegistered = true
	}
	return &instrumentedProvider{Provider: p, m: m}, nil
}

type instrumentedProvider struct {
	sandbox.Provider
	m *Metrics
}

func (p *instrumentedProvider) Open(ctx context.Context, opts sandbox.SessionOptions) (sandbox.Session, error) {
	s, err := p.Provider.Open(ctx, opts)
	if err != nil {
		if errors.Is(err, sandbox.ErrCapacity) {
			p.m.CapacityRejections.Inc()
		}
		return nil, err
	}
	return &instrumentedSession{Session: s, m: p.m}, nil
}

type instrumentedSession struct {
	sandbox.Session
	m *Metrics
}

func (s *instrumentedSession) Run(ctx context.Context, code string) (sandbox.Result, error) {
	return s.observe(ctx, func() (sandbox.Result, error) { return s.Session.Run(ctx, code) })
}

// Shell implements sandbox.Sheller: the wrapped session's shell (or
// sandbox.ErrNoShell), observed as a run. Without it the wrapper would
// hide the provider's shell and every hosted shell call would be
// rejected.
func (s *instrumentedSession) Shell(ctx context.Context, req sandbox.ShellRequest) (sandbox.Result, error) {
	return s.observe(ctx, func() (sandbox.Result, error) { return sandbox.Shell(ctx, s.Session, req) })
}

func (s *instrumentedSession) observe(ctx context.Context, run func() (sandbox.Result, error)) (sandbox.Result, error) {
	start := time.Now()
	res, err := run()
	if err != nil {
		if !errors.Is(err, sandbox.ErrNoShell) {
			s.m.CodeRuns.WithLabelValues("not_run").Inc()
		}
		return res, err
	}
	observe(ctx, s.m.RunSeconds, time.Since(start).Seconds())
	s.m.CodeRuns.WithLabelValues(string(res.Outcome)).Inc()
	if res.Outcome == sandbox.OutcomeCapacity {
		s.m.CapacityRejections.Inc()
	}
	return res, nil
}

var _ sandbox.Sheller = (*instrumentedSession)(nil)

// observe records v in h with the trace of ctx's span as its exemplar when
// the span is sampled (tracing on), so that a slow bucket leads to its
// trace; a Prometheus that negotiates OpenMetrics scrapes them.
func observe(ctx context.Context, h prometheus.Histogram, v float64) {
	sc := trace.SpanContextFromContext(ctx)
	if eo, ok := h.(prometheus.ExemplarObserver); ok && sc.IsSampled() {
		eo.ObserveWithExemplar(v, prometheus.Labels{"trace_id": sc.TraceID().String(), "span_id": sc.SpanID().String()})
		return
	}
	h.Observe(v)
}
