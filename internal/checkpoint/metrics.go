package checkpoint

import (
	"errors"
	"time"

	"github.com/prometheus/client_golang/prometheus"
)

// metrics are a Keeper's Prometheus collectors (Instrument).
type metrics struct {
	saves   *prometheus.CounterVec // result: saved, too_large, fenced, error
	loads   *prometheus.CounterVec // result: loaded, none, refused, foreign, error
	fences  *prometheus.CounterVec // op: save, mark_running
	bytes   prometheus.Histogram
	seconds *prometheus.HistogramVec // op: save, load
	sweeps  prometheus.Counter
}

// Instrument registers the Keeper's metrics with reg: checkpoints saved
// and loaded by result (refused counts the ones that failed their check,
// foreign the ones of another key, format or origin), writes refused for
// a stale fence, their sizes, the time a save or a load took, and what
// sweeps removed.
func (k *Keeper) Instrument(reg prometheus.Registerer) error {
	m := &metrics{
		saves: prometheus.NewCounterVec(prometheus.CounterOpts{Namespace: "codeinterp", Name: "checkpoint_saves_total",
			Help: "Container checkpoints written, by result (saved, too_large, fenced, error)."}, []string{"result"}),
		loads: prometheus.NewCounterVec(prometheus.CounterOpts{Namespace: "codeinterp", Name: "checkpoint_loads_total",
			Help: "Container checkpoints looked up, by result (loaded, none, refused, foreign, error)."}, []string{"result"}),
		fences: prometheus.NewCounterVec(prometheus.CounterOpts{Namespace: "codeinterp", Name: "checkpoint_fenced_writes_total",
			Help: "Checkpoint writes refused because another server holds the container under a higher lease token, by operation (save, mark_running)."}, []string{"op"}),
		bytes: prometheus.NewHistogram(prometheus.HistogramOpts{Namespace: "codeinterp", Name: "checkpoint_bytes",
			Help: "Size of a container checkpoint's state.", Buckets: prometheus.ExponentialBuckets(64<<10, 2, 12)}),
		seconds: prometheus.NewHistogramVec(prometheus.HistogramOpts{Namespace: "codeinterp", Name: "checkpoint_store_seconds",
			Help: "Time to seal and write (save) or read and open (load) a checkpoint.", Buckets: prometheus.DefBuckets}, []string{"op"}),
		sweeps: prometheus.NewCounter(prometheus.CounterOpts{Namespace: "codeinterp", Name: "checkpoint_swept_total",
			Help: "Checkpoints and bases removed by the expiry sweep."}),
	}
	for _, c := range []prometheus.Collector{m.saves, m.loads, m.fences, m.bytes, m.seconds, m.sweeps} {
		if err := reg.Register(c); err != nil {
			return err
		}
	}
	k.metrics = m
	return nil
}

func (m *metrics) saved(n int, err error, took time.Duration) {
	if m == nil {
		return
	}
	switch {
	case err == nil:
		m.saves.WithLabelValues("saved").Inc()
		m.bytes.Observe(float64(n))
		m.seconds.WithLabelValues("save").Observe(took.Seconds())
	case errors.Is(err, ErrTooLarge):
		m.saves.WithLabelValues("too_large").Inc()
	case errors.Is(err, ErrFenced):
		m.saves.WithLabelValues("fenced").Inc()
	default:
		m.saves.WithLabelValues("error").Inc()
	}
}

func (m *metrics) loaded(err error, took time.Duration) {
	if m == nil {
		return
	}
	switch {
	case err == nil:
		m.loads.WithLabelValues("loaded").Inc()
		m.seconds.WithLabelValues("load").Observe(took.Seconds())
	case errors.Is(err, ErrNone):
		m.loads.WithLabelValues("none").Inc()
	case errors.Is(err, ErrRefused):
		m.loads.WithLabelValues("refused").Inc()
	case errors.Is(err, ErrForeign):
		m.loads.WithLabelValues("foreign").Inc()
	default:
		m.loads.WithLabelValues("error").Inc()
	}
}

func (m *metrics) fenced(op string) {
	if m != nil {
		m.fences.WithLabelValues(op).Inc()
	}
}

func (m *metrics) swept(n int) {
	if m != nil {
		m.sweeps.Add(float64(n))
	}
}
