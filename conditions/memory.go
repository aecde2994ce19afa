package conditions

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"sync/atomic"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/procfs"
	"golang.org/x/sys/unix"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/nodeward/nodeward/api/v1alpha1"
)

const (
	memoryName      = "memory"
	memoryCondition = v1alpha1.ConditionMemoryPressure
)

var memoryKind = probeKind{
	name: memoryName, conditions: []conditionRow{{memoryCondition, "memory-pressure"}},
	section: func(c *Config) section { return &c.Memory },
	build:   func(c *Config, env *Env) []Probe { return []Probe{NewMemoryProbe(c.Memory, c.ProcRoot, env)} },
}

// MemoryConfig: MemAvailable and memory PSI.
type MemoryConfig struct {
	Enabled bool `json:"enabled"`
	// MinAvailableBytes and MinAvailablePercent (of MemTotal): below either
	// is pressure; 0 disables that check.
	MinAvailableBytes   uint64  `json:"minAvailableBytes"`
	MinAvailablePercent float64 `json:"minAvailablePercent"`
	// PSISomeAvg10Percent and PSIFullAvg10Percent: above either is
	// pressure; 0 disables that check.
	PSISomeAvg10Percent float64 `json:"psiSomeAvg10Percent"`
	PSIFullAvg10Percent float64 `json:"psiFullAvg10Percent"`
	// Trigger is a PSI trigger ("some 150000 2000000": 150 ms of stall in a
	// 2 s window). Each kernel event wakes the probe at once and is
	// pressure for the next 1.5 windows; empty disables it. The kernel
	// gives only privileged processes windows that are not multiples of
	// 2 s: for an unprivileged agent the probe polls the kernel's stall
	// totals instead (PSIPollInterval) and decides the same threshold over
	// the same window itself.
	Trigger      string          `json:"trigger"`
	PollInterval metav1.Duration `json:"pollInterval"`
	// PSIPollInterval is how often the stall totals are read where the
	// kernel refuses the trigger's window, while they grow (after a window
	// without stall, five times as long, at most half the window);
	// positive and shorter than the window.
	PSIPollInterval metav1.Duration `json:"psiPollInterval"`
}

func (c *MemoryConfig) enabled() bool { return c.Enabled }

// DefaultMemoryTrigger is 75 ms of full stall in a 1 s window (7.5 % of the
// time). A privileged agent (the DaemonSet's) gets the kernel's trigger with
// the 1 s window; an unprivileged one, which the kernel refuses it, polls
// the stall totals every DefaultPSIPollInterval and decides the same 75 ms
// within 1 s itself (docs/benchmarks.md).
const DefaultMemoryTrigger = "full 75000 1000000"

// DefaultPSIPollInterval is how often an unprivileged agent reads the
// memory stall totals.
const DefaultPSIPollInterval = 100 * time.Millisecond

func (c *MemoryConfig) setDefaults() {
	*c = MemoryConfig{Enabled: true, MinAvailablePercent: 5, PSIFullAvg10Percent: 20,
		Trigger: DefaultMemoryTrigger, PollInterval: metav1.Duration{Duration: 10 * time.Second},
		PSIPollInterval: metav1.Duration{Duration: DefaultPSIPollInterval}}
}

func (c *MemoryConfig) validate(prefix string, errs *FieldErrors) {
	errs.positive(prefix+"pollInterval", c.PollInterval)
	errs.percent(prefix+"minAvailablePercent", c.MinAvailablePercent)
	errs.percent(prefix+"psiSomeAvg10Percent", c.PSISomeAvg10Percent)
	errs.percent(prefix+"psiFullAvg10Percent", c.PSIFullAvg10Percent)
	errs.positive(prefix+"psiPollInterval", c.PSIPollInterval)
	if c.Trigger != "" {
		t, err := parsePSITrigger(c.Trigger)
		if err != nil {
			errs.Add(prefix+"trigger", c.Trigger, err.Error())
		} else if c.PSIPollInterval.Duration >= t.window {
			errs.Add(prefix+"psiPollInterval", c.PSIPollInterval.Duration.String(),
				fmt.Sprintf("must be shorter than the trigger's window (%v)", t.window))
		}
	}
}

// memoryMetrics are the memory probe's measurements.
type memoryMetrics struct {
	available, total prometheus.Gauge
	psiAverage       *prometheus.GaugeVec
	psiStalled       *constCounters
	triggerActive    prometheus.Gauge
	triggerWindow    prometheus.Gauge
	triggerEvents    prometheus.Counter
	polling          prometheus.Gauge
}

func newMemoryMetrics(reg prometheus.Registerer) *memoryMetrics {
	m := &memoryMetrics{
		available:     gauge("memory_available_bytes", "MemAvailable from /proc/meminfo."),
		total:         gauge("memory_total_bytes", "MemTotal from /proc/meminfo."),
		psiAverage:    gaugeVec("pressure_memory_waiting_ratio", "Memory PSI average share of time stalled, by kind (some, full) and window.", "kind", "window"),
		psiStalled:    newConstCounters("nodeward_pressure_memory_stalled_seconds_total", "Memory PSI total stall time, by kind (some, full).", "kind"),
		triggerActive: gauge("pressure_memory_trigger_active", "1 while a memory PSI trigger wakes the probe."),
		triggerWindow: gauge("pressure_memory_trigger_window_seconds", "The window of the memory PSI trigger in force, the kernel's or the polled totals'; widened to 2 s only where neither 1 s trigger nor polling is possible."),
		triggerEvents: prometheus.NewCounter(prometheus.CounterOpts{Name: "nodeward_pressure_memory_trigger_events_total",
			Help: "Events of the memory PSI trigger: each is a memory stall above the trigger's threshold (a kernel event, or a crossing found by polling the totals)."}),
		polling: gauge("pressure_memory_polling", "1 while the memory PSI trigger's threshold is decided by polling the stall totals (the kernel refused its window)."),
	}
	reg.MustRegister(m.available, m.total, m.psiAverage, m.psiStalled, m.triggerActive, m.triggerWindow, m.triggerEvents, m.polling)
	return m
}

// MemoryProbe compares MemAvailable and memory PSI with thresholds. A PSI
// trigger, where the kernel accepts one, is a threshold of its own: each
// event the kernel sends wakes the probe, and a sample taken within one
// trigger window of an event is bad. Where the kernel refuses the trigger's
// window, a psiPoller decides the same threshold from the stall totals.
type MemoryProbe struct {
	cfg      MemoryConfig
	procRoot string
	metrics  *memoryMetrics
	now      func() time.Time
	// triggerWindow is the window of the trigger in force, in ns (0: no
	// valid trigger); Watch widens it when the kernel refuses the window
	// and the totals cannot be polled either.
	triggerWindow atomic.Int64
	// lastTrigger is when the kernel last signalled the trigger (Unix ns;
	// 0: never). The kernel signals at most once per window while the
	// stall lasts.
	lastTrigger atomic.Int64
	// poller is set while the stall totals are polled instead.
	poller atomic.Pointer[psiPoller]
}

// NewMemoryProbe reads /proc under procRoot and registers its metrics on
// env's Registerer; a nil env stands for the defaults.
func NewMemoryProbe(cfg MemoryConfig, procRoot string, env *Env) *MemoryProbe {
	// The config was validated at load; an invalid trigger leaves the
	// window at 0, and Watch reports the kernel's refusal.
	trigger, _ := parsePSITrigger(cfg.Trigger)
	window := trigger.window
	p := &MemoryProbe{cfg: cfg, procRoot: procRoot, metrics: newMemoryMetrics(env.registerer()), now: env.now()}
	p.triggerWindow.Store(int64(window))
	p.metrics.triggerWindow.Set(window.Seconds())
	return p
}

func (p *MemoryProbe) Interval() time.Duration             { return p.cfg.PollInterval.Duration }
func (p *MemoryProbe) Name() string                        { return memoryName }
func (p *MemoryProbe) Condition() corev1.NodeConditionType { return memoryCondition }

// Watch registers the PSI trigger; see psiTrigger.watch.
func (p *MemoryProbe) Watch(ctx context.Context, wake chan<- struct{}) error {
	if p.cfg.Trigger == "" {
		return fmt.Errorf("no PSI trigger configured")
	}
	armed := func(on bool) { p.metrics.triggerActive.Set(boolFloat(on)) }
	fired := func() {
		p.lastTrigger.Store(p.now().UnixNano())
		p.metrics.triggerEvents.Inc()
	}
	t := psiTrigger{path: pressurePath(p.procRoot, "memory"), trigger: p.cfg.Trigger, armed: armed, fired: fired}
	err := p.watch(ctx, &t, wake)
	if own := pressurePath("/proc", "memory"); errors.Is(err, unix.EROFS) && t.path != own {
		// The DaemonSet mounts the host's /proc read-only, where a trigger
		// cannot be written. /proc/pressure is system-wide in every PID and
		// cgroup namespace, so the agent's own /proc has the same stall
		// figures and takes the trigger.
		t.path = own
		return p.watch(ctx, &t, wake)
	}
	return err
}

// watch runs t. Where the kernel refuses its window to an agent without
// CAP_SYS_RESOURCE, the probe polls the stall totals instead and decides
// the same threshold over the same window (psiPoller); should even that be
// impossible, the trigger is widened to the shortest window such an agent
// may use, with the same share of stall.
func (p *MemoryProbe) watch(ctx context.Context, t *psiTrigger, wake chan<- struct{}) error {
	err := t.watch(ctx, wake)
	if !errors.Is(err, unix.EINVAL) {
		return err
	}
	pollErr := p.poll(ctx, t.path, wake)
	if pollErr == nil {
		return nil
	}
	if wide, window, ok := widenedTrigger(t.trigger); ok {
		t.trigger = wide
		p.triggerWindow.Store(int64(window))
		p.metrics.triggerWindow.Set(window.Seconds())
		return t.watch(ctx, wake)
	}
	return errors.Join(err, pollErr)
}

// poll decides the trigger's threshold from the stall totals in path until
// ctx ends; see psiPoller.
func (p *MemoryProbe) poll(ctx context.Context, path string, wake chan<- struct{}) error {
	poller, err := newPSIPoller(path, p.cfg.Trigger, p.cfg.PSIPollInterval.Duration, p.now)
	if err != nil {
		return err
	}
	poller.crossed = p.metrics.triggerEvents.Inc
	p.poller.Store(poller)
	p.metrics.polling.Set(1)
	defer func() {
		p.poller.Store(nil)
		p.metrics.polling.Set(0)
	}()
	return poller.run(ctx, wake)
}

// triggerFiredRecently tells whether the kernel signalled the trigger
// within the last window (plus half a window: events are rate-limited to
// one per window, so one may come a little late while the stall goes on).
func (p *MemoryProbe) triggerFiredRecently(now time.Time) bool {
	last := p.lastTrigger.Load()
	if last == 0 {
		return false
	}
	window := time.Duration(p.triggerWindow.Load())
	return now.Sub(time.Unix(0, last)) <= window+window/2
}

// Sample reads meminfo and, when present, memory PSI. Without meminfo the
// result is Unknown; without PSI only MemAvailable decides.
func (p *MemoryProbe) Sample(context.Context) Signal {
	s := Signal{Condition: p.Condition(), At: p.now()}
	fs, err := procfs.NewFS(p.procRoot)
	if err != nil {
		return unknown(s, "ProcUnreadable", fmt.Errorf("open %s: %w", p.procRoot, err))
	}
	mi, err := fs.Meminfo()
	if err != nil || mi.MemTotalBytes == nil || mi.MemAvailableBytes == nil {
		if err == nil {
			err = fmt.Errorf("MemTotal or MemAvailable missing")
		}
		return unknown(s, "MeminfoUnreadable", fmt.Errorf("read meminfo: %w", err))
	}
	total, avail := *mi.MemTotalBytes, *mi.MemAvailableBytes
	p.metrics.total.Set(float64(total))
	p.metrics.available.Set(float64(avail))
	var problems []string
	if p.cfg.MinAvailableBytes > 0 && avail < p.cfg.MinAvailableBytes {
		problems = append(problems, fmt.Sprintf("MemAvailable %d bytes below %d", avail, p.cfg.MinAvailableBytes))
	}
	availPct := 100 * float64(avail) / float64(max(total, 1))
	if p.cfg.MinAvailablePercent > 0 && availPct < p.cfg.MinAvailablePercent {
		problems = append(problems, fmt.Sprintf("MemAvailable %.1f%% below %.1f%%", availPct, p.cfg.MinAvailablePercent))
	}
	summary := fmt.Sprintf("MemAvailable %d of %d bytes (%.1f%%)", avail, total, availPct)
	if p.triggerFiredRecently(s.At) {
		problems = append(problems, fmt.Sprintf("PSI trigger %q fired (memory stall above its threshold)", p.cfg.Trigger))
	}
	if poller := p.poller.Load(); poller != nil {
		pressure, say := poller.verdict(s.At)
		if pressure {
			problems = append(problems, fmt.Sprintf("PSI trigger %q: %s", p.cfg.Trigger, say))
		} else {
			summary += ", " + say
		}
	}
	psiSummary, psiProblems := p.checkPSI(fs)
	summary += psiSummary
	problems = append(problems, psiProblems...)
	if len(problems) > 0 {
		s.Verdict, s.Reason, s.Message = Unhealthy, "MemoryPressure", strings.Join(problems, "; ")
		return s
	}
	s.Verdict, s.Reason, s.Message = Healthy, "MemoryAvailable", summary
	return s
}

// checkPSI compares the memory PSI averages with their thresholds; without
// PSI (an old kernel) it says so and finds nothing.
func (p *MemoryProbe) checkPSI(fs procfs.FS) (summary string, problems []string) {
	psi, err := fs.PSIStatsForResource("memory")
	if err != nil {
		return ", PSI unavailable", nil
	}
	p.recordPSI(psi)
	if psi.Some != nil {
		summary += fmt.Sprintf(", PSI some avg10 %.2f%%", psi.Some.Avg10)
		if p.cfg.PSISomeAvg10Percent > 0 && psi.Some.Avg10 > p.cfg.PSISomeAvg10Percent {
			problems = append(problems, fmt.Sprintf("PSI some avg10 %.2f%% above %.2f%%", psi.Some.Avg10, p.cfg.PSISomeAvg10Percent))
		}
	}
	if psi.Full != nil {
		summary += fmt.Sprintf(", full avg10 %.2f%%", psi.Full.Avg10)
		if p.cfg.PSIFullAvg10Percent > 0 && psi.Full.Avg10 > p.cfg.PSIFullAvg10Percent {
			problems = append(problems, fmt.Sprintf("PSI full avg10 %.2f%% above %.2f%%", psi.Full.Avg10, p.cfg.PSIFullAvg10Percent))
		}
	}
	return summary, problems
}

func (p *MemoryProbe) recordPSI(psi procfs.PSIStats) {
	for kind, line := range map[string]*procfs.PSILine{"some": psi.Some, "full": psi.Full} {
		if line == nil {
			continue
		}
		p.metrics.psiAverage.WithLabelValues(kind, "10s").Set(line.Avg10 / 100)
		p.metrics.psiAverage.WithLabelValues(kind, "60s").Set(line.Avg60 / 100)
		p.metrics.psiAverage.WithLabelValues(kind, "300s").Set(line.Avg300 / 100)
		p.metrics.psiStalled.set(kind, float64(line.Total)/1e6)
	}
}
