package drain

import "github.com/prometheus/client_golang/prometheus"

// Metrics are the drain's Prometheus metrics. A nil *Metrics records nothing.
type Metrics struct {
	duration  *prometheus.HistogramVec
	evictions *prometheus.CounterVec
	blocked   prometheus.Gauge
}

// NewMetrics registers the drain metrics on reg.
func NewMetrics(reg prometheus.Registerer) (*Metrics, error) {
	m := &Metrics{
		duration: prometheus.NewHistogramVec(prometheus.HistogramOpts{
			Name:    "nodeward_drain_duration_seconds",
			Help:    "Wall time of drains, by outcome (drained, blocked, refused, failed).",
			Buckets: prometheus.ExponentialBuckets(1, 2, 12),
		}, []string{"outcome"}),
		evictions: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "nodeward_drain_evictions_total",
			Help: "Eviction requests by result (evicted, not_found, blocked_pdb, multiple_pdbs, error, deleted, forced).",
		}, []string{"result"}),
		blocked: prometheus.NewGauge(prometheus.GaugeOpts{
			Name: "nodeward_drain_blocked_pods",
			Help: "Pods currently blocking the drain of this node.",
		}),
	}
	for _, c := range []prometheus.Collector{m.duration, m.evictions, m.blocked} {
		if err := reg.Register(c); err != nil {
			return nil, err
		}
	}
	return m, nil
}

func (m *Metrics) eviction(result string) {
	if m != nil {
		m.evictions.WithLabelValues(result).Inc()
	}
}

func (m *Metrics) setBlocked(n int) {
	if m != nil {
		m.blocked.Set(float64(n))
	}
}

func (m *Metrics) observe(outcome string, seconds float64) {
	if m != nil {
		m.duration.WithLabelValues(outcome).Observe(seconds)
	}
}
