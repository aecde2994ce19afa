package coordinator

import (
	"github.com/prometheus/client_golang/prometheus"
)

// Metrics are the coordinator's Prometheus metrics.
type Metrics struct {
	grants      *prometheus.CounterVec
	unavailable *prometheus.GaugeVec
	queue       *prometheus.GaugeVec
}

// NewMetrics creates the metrics and registers them with reg when reg is
// not nil.
func NewMetrics(reg prometheus.Registerer) *Metrics {
	m := &Metrics{
		grants: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "nodeward_update_grants_total", Help: "Update slots granted, by pool.",
		}, []string{"pool"}),
		unavailable: prometheus.NewGaugeVec(prometheus.GaugeOpts{
			Name: "nodeward_pool_unavailable_nodes", Help: "Nodes of the pool counted unavailable.",
		}, []string{"pool"}),
		queue: prometheus.NewGaugeVec(prometheus.GaugeOpts{
			Name: "nodeward_pool_waiting_nodes", Help: "Nodes of the pool that need the target and hold no slot.",
		}, []string{"pool"}),
	}
	if reg != nil {
		reg.MustRegister(m.grants, m.unavailable, m.queue)
	}
	return m
}

func (m *Metrics) observe(pool string, p *poolPlan) {
	m.unavailable.WithLabelValues(pool).Set(float64(len(p.unavailable) + len(p.grant)))
}
