package conditions

import (
	"sync"

	"github.com/prometheus/client_golang/prometheus"
	corev1 "k8s.io/api/core/v1"
)

// Metrics are the health metrics every probe shares, in node_exporter
// style (nodeward_ prefix, base units, _total for counters): the current
// conditions, unreadable sources and the detection → API-write latency.
// Each probe registers its own measurements (see its file). A nil *Metrics
// records nothing.
type Metrics struct {
	conditionStatus  *prometheus.GaugeVec
	probeErrors      *prometheus.CounterVec
	detectionToWrite *prometheus.HistogramVec
}

// NewMetrics registers the shared health metrics on reg.
func NewMetrics(reg prometheus.Registerer) *Metrics {
	m := &Metrics{
		conditionStatus: prometheus.NewGaugeVec(prometheus.GaugeOpts{Name: "nodeward_node_condition",
			Help: "Nodeward's node conditions: 1 for the current status."}, []string{"condition", "status"}),
		probeErrors: prometheus.NewCounterVec(prometheus.CounterOpts{Name: "nodeward_probe_errors_total",
			Help: "Samples whose source could not be read, by probe."}, []string{"probe"}),
		detectionToWrite: prometheus.NewHistogramVec(prometheus.HistogramOpts{
			Name:    "nodeward_detection_to_write_seconds",
			Help:    "From the sample that changed a condition to the API write that published it.",
			Buckets: []float64{.01, .025, .05, .1, .25, .5, 1, 2.5, 5, 10, 30},
		}, []string{"condition"}),
	}
	reg.MustRegister(m.conditionStatus, m.probeErrors, m.detectionToWrite)
	return m
}

// ProbeError counts an unreadable source.
func (m *Metrics) ProbeError(probe string) {
	if m != nil {
		m.probeErrors.WithLabelValues(probe).Inc()
	}
}

// SetCondition records the current status of a condition.
func (m *Metrics) SetCondition(c Condition) {
	if m == nil {
		return
	}
	for _, s := range []corev1.ConditionStatus{corev1.ConditionTrue, corev1.ConditionFalse, corev1.ConditionUnknown} {
		m.conditionStatus.WithLabelValues(string(c.Type), string(s)).Set(boolFloat(c.Status == s))
	}
}

// ObserveWrite records the detection → API-write latency of a condition.
func (m *Metrics) ObserveWrite(t corev1.NodeConditionType, seconds float64) {
	if m != nil {
		m.detectionToWrite.WithLabelValues(string(t)).Observe(seconds)
	}
}

func boolFloat(b bool) float64 {
	if b {
		return 1
	}
	return 0
}

// gauge and gaugeVec make a probe's metrics under the nodeward_ prefix.
func gauge(name, help string) prometheus.Gauge {
	return prometheus.NewGauge(prometheus.GaugeOpts{Name: "nodeward_" + name, Help: help})
}

func gaugeVec(name, help string, labels ...string) *prometheus.GaugeVec {
	return prometheus.NewGaugeVec(prometheus.GaugeOpts{Name: "nodeward_" + name, Help: help}, labels)
}

// constCounters exposes counters kept by the kernel (PSI totals) whose
// values are set, not incremented.
type constCounters struct {
	desc   *prometheus.Desc
	mu     sync.Mutex
	values map[string]float64
}

func newConstCounters(name, help, label string) *constCounters {
	return &constCounters{desc: prometheus.NewDesc(name, help, []string{label}, nil), values: map[string]float64{}}
}

func (c *constCounters) set(label string, v float64) {
	c.mu.Lock()
	c.values[label] = v
	c.mu.Unlock()
}

func (c *constCounters) Describe(ch chan<- *prometheus.Desc) { ch <- c.desc }

func (c *constCounters) Collect(ch chan<- prometheus.Metric) {
	c.mu.Lock()
	defer c.mu.Unlock()
	for label, v := range c.values {
		ch <- prometheus.MustNewConstMetric(c.desc, prometheus.CounterValue, v, label)
	}
}
