package coordinator

import (
	"net/http"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/promhttp"
)

// Metrics are the coordinator's Prometheus metrics.
type Metrics struct {
	grants      *prometheus.CounterVec
	unavailable *prometheus.GaugeVec
	queue       *prometheus.GaugeVec
	requests    *prometheus.CounterVec
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
		requests: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "nodeward_coordinator_api_requests_total", Help: "Requests the coordinator sent to the API server, by method.",
		}, []string{"method"}),
	}
	if reg != nil {
		reg.MustRegister(m.grants, m.unavailable, m.queue, m.requests)
	}
	return m
}

func (m *Metrics) observe(pool string, p *poolPlan) {
	m.unavailable.WithLabelValues(pool).Set(float64(len(p.unavailable) + len(p.grant)))
}

// WrapTransport counts the coordinator's API requests; use it as the
// rest.Config's WrapTransport.
func (m *Metrics) WrapTransport(rt http.RoundTripper) http.RoundTripper {
	return promhttp.InstrumentRoundTripperCounter(m.requests, rt)
}
