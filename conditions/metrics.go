package conditions

import (
	"sync"

	"github.com/prometheus/client_golang/prometheus"
	corev1 "k8s.io/api/core/v1"
)

// Metrics are the health metrics in node_exporter style: nodeward_ prefix,
// base units, _total for counters. Probes given nil record into a private
// registry nobody reads (`nodeward check`).
type Metrics struct {
	memAvailable, memTotal    prometheus.Gauge
	psiAverage                *prometheus.GaugeVec
	psiStalled                *constCounters
	fsAvail, fsSize           *prometheus.GaugeVec
	fsFiles, fsFilesFree      *prometheus.GaugeVec
	processes, processesLimit prometheus.Gauge
	networkUp, runtimeUp      prometheus.Gauge
	conditionStatus           *prometheus.GaugeVec
	probeErrors               *prometheus.CounterVec
	netlinkResubscribes       prometheus.Counter
	detectionToWrite          *prometheus.HistogramVec
	psiTriggerActive          prometheus.Gauge
	psiTriggerEvents          prometheus.Counter
}

// NewMetrics registers the health metrics on reg.
func NewMetrics(reg prometheus.Registerer) *Metrics {
	g := func(name, help string) prometheus.Gauge {
		return prometheus.NewGauge(prometheus.GaugeOpts{Name: "nodeward_" + name, Help: help})
	}
	gv := func(name, help string, labels ...string) *prometheus.GaugeVec {
		return prometheus.NewGaugeVec(prometheus.GaugeOpts{Name: "nodeward_" + name, Help: help}, labels)
	}
	m := &Metrics{
		memAvailable:   g("memory_available_bytes", "MemAvailable from /proc/meminfo."),
		memTotal:       g("memory_total_bytes", "MemTotal from /proc/meminfo."),
		psiAverage:     gv("pressure_memory_waiting_ratio", "Memory PSI average share of time stalled, by kind (some, full) and window.", "kind", "window"),
		psiStalled:     newConstCounters("nodeward_pressure_memory_stalled_seconds_total", "Memory PSI total stall time, by kind (some, full).", "kind"),
		fsAvail:        gv("filesystem_avail_bytes", "Bytes available to unprivileged users.", "device", "mountpoint"),
		fsSize:         gv("filesystem_size_bytes", "Filesystem size.", "device", "mountpoint"),
		fsFiles:        gv("filesystem_files", "Filesystem inodes.", "device", "mountpoint"),
		fsFilesFree:    gv("filesystem_files_free", "Free inodes.", "device", "mountpoint"),
		processes:      g("processes", "Processes and threads (4th field of /proc/loadavg)."),
		processesLimit: g("processes_limit", "min(pid_max, threads-max)."),
		networkUp:      g("network_up", "1 when a default route leaves through an up link with carrier and a global address."),
		runtimeUp:      g("runtime_up", "1 when the container runtime answers CRI Status with RuntimeReady."),
		conditionStatus: gv("node_condition", "Nodeward's node conditions: 1 for the current status.",
			"condition", "status"),
		probeErrors: prometheus.NewCounterVec(prometheus.CounterOpts{Name: "nodeward_probe_errors_total",
			Help: "Samples whose source could not be read, by probe."}, []string{"probe"}),
		netlinkResubscribes: prometheus.NewCounter(prometheus.CounterOpts{Name: "nodeward_netlink_resubscribes_total",
			Help: "Netlink subscriptions re-opened after their channel closed (ENOBUFS after a burst, for one)."}),
		detectionToWrite: prometheus.NewHistogramVec(prometheus.HistogramOpts{
			Name:    "nodeward_detection_to_write_seconds",
			Help:    "From the sample that changed a condition to the API write that published it.",
			Buckets: []float64{.01, .025, .05, .1, .25, .5, 1, 2.5, 5, 10, 30},
		}, []string{"condition"}),
		psiTriggerActive: g("pressure_memory_trigger_active", "1 while a memory PSI trigger wakes the probe."),
		psiTriggerEvents: prometheus.NewCounter(prometheus.CounterOpts{Name: "nodeward_pressure_memory_trigger_events_total",
			Help: "Events of the memory PSI trigger: each is a memory stall above the trigger's threshold."}),
	}
	reg.MustRegister(m.memAvailable, m.memTotal, m.psiAverage, m.psiStalled, m.fsAvail, m.fsSize,
		m.fsFiles, m.fsFilesFree, m.processes, m.processesLimit, m.networkUp, m.runtimeUp,
		m.conditionStatus, m.probeErrors, m.netlinkResubscribes, m.detectionToWrite, m.psiTriggerActive,
		m.psiTriggerEvents)
	return m
}

func (m *Metrics) setGauge(g prometheus.Gauge, v float64) {
	if m != nil {
		g.Set(v)
	}
}

func boolFloat(b bool) float64 {
	if b {
		return 1
	}
	return 0
}

// ProbeError counts an unreadable source.
func (m *Metrics) ProbeError(probe string) {
	if m != nil {
		m.probeErrors.WithLabelValues(probe).Inc()
	}
}

// NetlinkResubscribe counts a re-opened netlink subscription.
func (m *Metrics) NetlinkResubscribe() {
	if m != nil {
		m.netlinkResubscribes.Inc()
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

// orDiscard returns m, or metrics registered nowhere when m is nil.
func orDiscard(m *Metrics) *Metrics {
	if m == nil {
		return NewMetrics(prometheus.NewRegistry())
	}
	return m
}
