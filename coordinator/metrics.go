package coordinator

import (
	"sync"

	"github.com/prometheus/client_golang/prometheus"
)

// Metrics are the coordinator's Prometheus metrics. Every series is per
// pool, and per node only for the nodes in flight, so the cardinality is
// bounded by the pools and their maxUnavailable.
type Metrics struct {
	grants      *prometheus.CounterVec
	unavailable *prometheus.GaugeVec
	queue       *prometheus.GaugeVec
	waiting     *prometheus.GaugeVec
	inProgress  *prometheus.GaugeVec
	// nodes and maxUnavailable are the pool's status counts and budget,
	// so that a dashboard draws the rollout's progress and the unavailable
	// nodes against their limit without reading the API.
	nodes          *prometheus.GaugeVec
	maxUnavailable *prometheus.GaugeVec
	// gatesPassing, gateSeconds and silenceErrors exist only for the
	// pools with gates or silences.
	gatesPassing  *prometheus.GaugeVec
	gateSeconds   *prometheus.HistogramVec
	silenceErrors *prometheus.CounterVec
	// planSeconds is the pure planning of a pass (the caches read, the
	// plan made), without the API writes: what a pass costs at scale.
	planSeconds *prometheus.HistogramVec

	mu sync.Mutex
	// flying holds each pool's nodes in nodeward_node_update_in_progress,
	// so that a node whose grant ended loses its series.
	flying map[string][]string
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
		waiting: prometheus.NewGaugeVec(prometheus.GaugeOpts{
			Name: "nodeward_pool_waiting",
			Help: "1 for why the pool's rollout makes no progress now, 0 for the other reasons: " +
				"none, paused, halted, gates_failing, outside_window, limit_reached, soaking, staging, drain_blocked, degraded.",
		}, []string{"pool", "reason"}),
		inProgress: prometheus.NewGaugeVec(prometheus.GaugeOpts{
			Name: "nodeward_node_update_in_progress",
			Help: "1 while the node holds an update slot of the pool (a planned drain and reboot); no series otherwise.",
		}, []string{"node", "pool"}),
		nodes: prometheus.NewGaugeVec(prometheus.GaugeOpts{
			Name: "nodeward_pool_nodes",
			Help: "Nodes of the pool by state: total (the pool selects), updated (run the target), updating (hold a slot), degraded (failed on the target).",
		}, []string{"pool", "state"}),
		maxUnavailable: prometheus.NewGaugeVec(prometheus.GaugeOpts{
			Name: "nodeward_pool_max_unavailable",
			Help: "The pool's maxUnavailable resolved to a node count: the most nodes counted unavailable at once.",
		}, []string{"pool"}),
		gatesPassing: prometheus.NewGaugeVec(prometheus.GaugeOpts{
			Name: "nodeward_pool_gates_passing",
			Help: "1 when the pool's health gates passed at their last evaluation, 0 when they held grants (fail closed).",
		}, []string{"pool"}),
		gateSeconds: prometheus.NewHistogramVec(prometheus.HistogramOpts{
			Name:    "nodeward_pool_gate_evaluation_seconds",
			Help:    "Time to evaluate the pool's health gates against Prometheus.",
			Buckets: []float64{.001, .0025, .005, .01, .025, .05, .1, .25, .5, 1, 2.5, 5},
		}, []string{"pool"}),
		silenceErrors: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "nodeward_pool_silence_errors_total",
			Help: "Failed syncs of the pool's Alertmanager silences.",
		}, []string{"pool"}),
		planSeconds: prometheus.NewHistogramVec(prometheus.HistogramOpts{
			Name:    "nodeward_pool_plan_seconds",
			Help:    "Time to plan a pass of the pool from the caches (no API request in it); its count is the passes.",
			Buckets: []float64{.0005, .001, .0025, .005, .01, .025, .05, .1, .25, .5, 1},
		}, []string{"pool"}),
		flying: map[string][]string{},
	}
	if reg != nil {
		reg.MustRegister(m.grants, m.unavailable, m.queue, m.waiting, m.inProgress, m.nodes, m.maxUnavailable, m.gatesPassing,
			m.gateSeconds, m.silenceErrors, m.planSeconds)
	}
	return m
}

// observe publishes one pool's plan.
func (m *Metrics) observe(pool string, p *poolPlan) {
	m.grants.WithLabelValues(pool) // 0 from the first plan: increase() sees the first grant
	m.unavailable.WithLabelValues(pool).Set(float64(len(p.unavailable) + len(p.grant)))
	m.queue.WithLabelValues(pool).Set(float64(p.queued))
	m.maxUnavailable.WithLabelValues(pool).Set(float64(p.limit))
	for state, n := range map[string]int{"total": p.machines, "updated": p.updated, "updating": len(p.inFlight),
		"degraded": len(p.degraded)} {
		m.nodes.WithLabelValues(pool, state).Set(float64(n))
	}
	for _, r := range waitReasons() {
		v := 0.0
		if r == p.hold.reason {
			v = 1
		}
		m.waiting.WithLabelValues(pool, string(r)).Set(v)
	}
	m.mu.Lock()
	defer m.mu.Unlock()
	now := map[string]bool{}
	for _, n := range p.inFlight {
		now[n] = true
		m.inProgress.WithLabelValues(n, pool).Set(1)
	}
	for _, n := range m.flying[pool] {
		if !now[n] {
			m.inProgress.DeleteLabelValues(n, pool)
		}
	}
	m.flying[pool] = append([]string(nil), p.inFlight...)
}

// forget drops the series of a pool that no longer exists.
func (m *Metrics) forget(pool string) {
	match := prometheus.Labels{"pool": pool}
	for _, v := range []*prometheus.MetricVec{m.grants.MetricVec, m.unavailable.MetricVec, m.queue.MetricVec,
		m.waiting.MetricVec, m.inProgress.MetricVec, m.nodes.MetricVec, m.maxUnavailable.MetricVec, m.gatesPassing.MetricVec, m.gateSeconds.MetricVec, m.silenceErrors.MetricVec,
		m.planSeconds.MetricVec} {
		v.DeletePartialMatch(match)
	}
	m.mu.Lock()
	delete(m.flying, pool)
	m.mu.Unlock()
}

// stopped drops every pool's gauges when the controller stops (a leader
// that lost its Lease): only the leader's plan is current.
func (m *Metrics) stopped() {
	for _, v := range []*prometheus.GaugeVec{m.unavailable, m.queue, m.waiting, m.inProgress, m.nodes, m.maxUnavailable, m.gatesPassing} {
		v.Reset()
	}
	m.mu.Lock()
	clear(m.flying)
	m.mu.Unlock()
}
