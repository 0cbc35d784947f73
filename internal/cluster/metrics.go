package cluster

import (
	"errors"
	"time"

	"github.com/prometheus/client_golang/prometheus"
)

// Metrics counts what the Node does. A nil *Metrics counts nothing.
type Metrics struct {
	forwards  *prometheus.CounterVec
	duration  prometheus.Histogram
	takeovers prometheus.Counter
	losses    prometheus.Counter
	refusals  prometheus.Counter
	serves    prometheus.Counter
}

// Instrument registers the Node's metrics in reg.
func (n *Node) Instrument(reg prometheus.Registerer) error {
	m := &Metrics{
		forwards: prometheus.NewCounterVec(prometheus.CounterOpts{Name: "codeinterp_cluster_forwards_total",
			Help: "Runs forwarded to the replica holding their container, by result."}, []string{"result"}),
		duration: prometheus.NewHistogram(prometheus.HistogramOpts{Name: "codeinterp_cluster_forward_seconds",
			Help: "Forwarded runs, from sending to the holder's answer.", Buckets: prometheus.ExponentialBuckets(0.001, 2, 16)}),
		takeovers: prometheus.NewCounter(prometheus.CounterOpts{Name: "codeinterp_cluster_takeovers_total",
			Help: "Leases taken from a holder found gone."}),
		losses: prometheus.NewCounter(prometheus.CounterOpts{Name: "codeinterp_cluster_leases_lost_total",
			Help: "Leases this replica held that another took (its interpreter was dropped)."}),
		refusals: prometheus.NewCounter(prometheus.CounterOpts{Name: "codeinterp_cluster_refused_total",
			Help: "Forwarded runs refused for a wrong secret."}),
		serves: prometheus.NewCounter(prometheus.CounterOpts{Name: "codeinterp_cluster_served_total",
			Help: "Runs other replicas forwarded here that ran."}),
	}
	for _, c := range []prometheus.Collector{m.forwards, m.duration, m.takeovers, m.losses, m.refusals, m.serves} {
		if err := reg.Register(c); err != nil {
			return err
		}
	}
	n.mu.Lock()
	n.metrics = m
	n.mu.Unlock()
	return nil
}

func (m *Metrics) forwarded(err error, d time.Duration) {
	if m == nil {
		return
	}
	result := "ok"
	switch {
	case err == nil:
		m.duration.Observe(d.Seconds())
	case errors.Is(err, ErrLost):
		result = "lost"
	default:
		result = "error"
	}
	m.forwards.WithLabelValues(result).Inc()
}

func (m *Metrics) takeover() {
	if m != nil {
		m.takeovers.Inc()
	}
}

func (m *Metrics) lost() {
	if m != nil {
		m.losses.Inc()
	}
}

func (m *Metrics) refused() {
	if m != nil {
		m.refusals.Inc()
	}
}

func (m *Metrics) served() {
	if m != nil {
		m.serves.Inc()
	}
}
