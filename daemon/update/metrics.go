package update

import (
	"time"

	v1alpha1 "github.com/nodeward/nodeward/api/v1alpha1"
	"github.com/prometheus/client_golang/prometheus"
)

// Metrics are the agent's update lifecycle's Prometheus metrics.
type Metrics struct {
	step             *prometheus.GaugeVec
	stepDuration     *prometheus.HistogramVec
	unavailableTime  prometheus.Histogram
	grants           prometheus.Counter
	stagedBeforeSlot prometheus.Counter
	rollbacks        prometheus.Counter
}

// NewMetrics creates the metrics and registers them with reg.
func NewMetrics(reg prometheus.Registerer) (*Metrics, error) {
	m := &Metrics{
		step: prometheus.NewGaugeVec(prometheus.GaugeOpts{
			Name: "nodeward_update_step",
			Help: "1 for the update step this node is in, 0 for the others.",
		}, []string{"step"}),
		stepDuration: prometheus.NewHistogramVec(prometheus.HistogramOpts{
			Name:    "nodeward_update_step_duration_seconds",
			Help:    "Time spent in each update step.",
			Buckets: prometheus.ExponentialBuckets(0.1, 3, 12),
		}, []string{"step"}),
		unavailableTime: prometheus.NewHistogram(prometheus.HistogramOpts{
			Name:    "nodeward_update_unavailable_seconds",
			Help:    "Seconds from cordon to uncordon, per completed update.",
			Buckets: prometheus.ExponentialBuckets(1, 2, 14),
		}),
		grants: prometheus.NewCounter(prometheus.CounterOpts{
			Name: "nodeward_update_grants_received_total",
			Help: "Slots this node received from the coordinator (the coordinator counts the slots it grants in nodeward_update_grants_total{pool}).",
		}),
		stagedBeforeSlot: prometheus.NewCounter(prometheus.CounterOpts{
			Name: "nodeward_update_staged_before_slot_total",
			Help: "Grants that found the target already staged; divide by nodeward_update_grants_received_total for the staged-before-slot ratio.",
		}),
		rollbacks: prometheus.NewCounter(prometheus.CounterOpts{
			Name: "nodeward_update_rollbacks_total",
			Help: "Updates rolled back: the new OS failed verification and the node booted back into its previous deployment.",
		}),
	}
	for _, c := range []prometheus.Collector{m.step, m.stepDuration, m.unavailableTime, m.grants, m.stagedBeforeSlot, m.rollbacks} {
		if err := reg.Register(c); err != nil {
			return nil, err
		}
	}
	for _, s := range v1alpha1.AllSteps() {
		m.step.WithLabelValues(string(s)).Set(0)
	}
	return m, nil
}

func (m *Metrics) setStep(current v1alpha1.Step) {
	for _, s := range v1alpha1.AllSteps() {
		v := 0.0
		if s == current {
			v = 1
		}
		m.step.WithLabelValues(string(s)).Set(v)
	}
}

func (m *Metrics) stepDone(s v1alpha1.Step, d time.Duration) {
	m.stepDuration.WithLabelValues(string(s)).Observe(d.Seconds())
}

func (m *Metrics) unavailable(d time.Duration) { m.unavailableTime.Observe(d.Seconds()) }

func (m *Metrics) granted(stagedBefore bool) {
	m.grants.Inc()
	if stagedBefore {
		m.stagedBeforeSlot.Inc()
	}
}

func (m *Metrics) rolledBack() {
	if m != nil {
		m.rollbacks.Inc()
	}
}
