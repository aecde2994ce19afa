package conditions

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"sync/atomic"
	"time"

	"github.com/prometheus/procfs"
	"golang.org/x/sys/unix"
	corev1 "k8s.io/api/core/v1"

	"github.com/nodeward/nodeward/api/v1alpha1"
)

// MemoryProbe compares MemAvailable and memory PSI with thresholds. A PSI
// trigger, where the kernel accepts one, is a threshold of its own: each
// event the kernel sends wakes the probe, and a sample taken within one
// trigger window of an event is bad.
type MemoryProbe struct {
	cfg      MemoryConfig
	procRoot string
	metrics  *Metrics
	// triggerWindow is the trigger's window (0: no valid trigger).
	triggerWindow time.Duration
	// lastTrigger is when the kernel last signalled the trigger (Unix ns;
	// 0: never). The kernel signals at most once per window while the
	// stall lasts.
	lastTrigger atomic.Int64
}

// NewMemoryProbe reads /proc under procRoot.
func NewMemoryProbe(cfg MemoryConfig, procRoot string, m *Metrics) *MemoryProbe {
	// The config was validated at load; an invalid trigger leaves the
	// window at 0, and Notify reports the kernel's refusal.
	window, _ := parsePSITrigger(cfg.Trigger)
	return &MemoryProbe{cfg: cfg, procRoot: procRoot, metrics: orDiscard(m), triggerWindow: window}
}

func (p *MemoryProbe) Interval() time.Duration             { return p.cfg.PollInterval.Duration }
func (p *MemoryProbe) Name() string                        { return "memory" }
func (p *MemoryProbe) Condition() corev1.NodeConditionType { return v1alpha1.ConditionMemoryPressure }

// Notify registers the PSI trigger; see psiTrigger.watch.
func (p *MemoryProbe) Notify(ctx context.Context, wake chan<- struct{}) error {
	if p.cfg.Trigger == "" {
		return fmt.Errorf("no PSI trigger configured")
	}
	armed := func(on bool) { p.metrics.psiTriggerActive.Set(boolFloat(on)) }
	fired := func() {
		p.lastTrigger.Store(time.Now().UnixNano())
		p.metrics.psiTriggerEvents.Inc()
	}
	t := psiTrigger{path: pressurePath(p.procRoot, "memory"), trigger: p.cfg.Trigger, armed: armed, fired: fired}
	err := t.watch(ctx, wake)
	if own := pressurePath("/proc", "memory"); errors.Is(err, unix.EROFS) && t.path != own {
		// The DaemonSet mounts the host's /proc read-only, where a trigger
		// cannot be written. /proc/pressure is system-wide in every PID and
		// cgroup namespace, so the agent's own /proc has the same stall
		// figures and takes the trigger.
		t.path = own
		return t.watch(ctx, wake)
	}
	return err
}

// triggerFiredRecently tells whether the kernel signalled the trigger
// within the last window (plus half a window: events are rate-limited to
// one per window, so one may come a little late while the stall goes on).
func (p *MemoryProbe) triggerFiredRecently(now time.Time) bool {
	last := p.lastTrigger.Load()
	if last == 0 {
		return false
	}
	return now.Sub(time.Unix(0, last)) <= p.triggerWindow+p.triggerWindow/2
}

// Sample reads meminfo and, when present, memory PSI. Without meminfo the
// result is Unknown; without PSI only MemAvailable decides.
func (p *MemoryProbe) Sample(context.Context) Signal {
	s := Signal{Condition: p.Condition(), At: time.Now()}
	fs, err := procfs.NewFS(p.procRoot)
	if err != nil {
		return p.unknown(s, "ProcUnreadable", fmt.Errorf("open %s: %w", p.procRoot, err))
	}
	mi, err := fs.Meminfo()
	if err != nil || mi.MemTotalBytes == nil || mi.MemAvailableBytes == nil {
		if err == nil {
			err = fmt.Errorf("MemTotal or MemAvailable missing")
		}
		return p.unknown(s, "MeminfoUnreadable", fmt.Errorf("read meminfo: %w", err))
	}
	total, avail := *mi.MemTotalBytes, *mi.MemAvailableBytes
	p.metrics.setGauge(p.metrics.memTotal, float64(total))
	p.metrics.setGauge(p.metrics.memAvailable, float64(avail))
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
	psi, psiErr := fs.PSIStatsForResource("memory")
	if psiErr == nil {
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
	} else {
		summary += ", PSI unavailable"
	}
	if len(problems) > 0 {
		s.Health, s.Reason, s.Message = Unhealthy, "MemoryPressure", strings.Join(problems, "; ")
		return s
	}
	s.Health, s.Reason, s.Message = Healthy, "MemoryAvailable", summary
	return s
}

func (p *MemoryProbe) recordPSI(psi procfs.PSIStats) {
	if p.metrics == nil {
		return
	}
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

func (p *MemoryProbe) unknown(s Signal, reason string, err error) Signal {
	p.metrics.ProbeError(p.Name())
	s.Health, s.Reason, s.Message = Unknown, reason, err.Error()
	return s
}
