package conditions

import (
	"context"
	"log/slog"
	"sync"
	"time"

	corev1 "k8s.io/api/core/v1"
)

// Monitor runs probes continuously: each is sampled at its interval and
// whenever its source announces a change, and its samples pass through
// hysteresis into a condition. Consumers read Conditions after a signal on
// Changes.
type Monitor struct {
	probes  []Probe
	metrics *Metrics
	log     *slog.Logger
	now     func() time.Time

	mu      sync.Mutex
	hyst    map[corev1.NodeConditionType]*Hysteresis
	sampled map[corev1.NodeConditionType]bool
	changes chan struct{}
}

// MonitorConfig wires a Monitor.
type MonitorConfig struct {
	// Probes are sampled; one probe per condition type.
	Probes     []Probe
	Hysteresis HysteresisConfig
	// Metrics receive the conditions and the unreadable samples; nil
	// records nothing.
	Metrics *Metrics
	Log     *slog.Logger
	// Now is the clock the quiet periods are timed with; time.Now when nil.
	// Samples carry the time of their probe's clock.
	Now func() time.Time
}

// NewMonitor prepares the probes of cfg.
func NewMonitor(cfg MonitorConfig) *Monitor {
	if cfg.Log == nil {
		cfg.Log = slog.Default()
	}
	if cfg.Now == nil {
		cfg.Now = time.Now
	}
	mon := &Monitor{
		probes: cfg.Probes, metrics: cfg.Metrics, log: cfg.Log, now: cfg.Now,
		hyst:    make(map[corev1.NodeConditionType]*Hysteresis, len(cfg.Probes)),
		sampled: make(map[corev1.NodeConditionType]bool, len(cfg.Probes)),
		changes: make(chan struct{}, 1),
	}
	for _, p := range cfg.Probes {
		mon.hyst[p.Condition()] = NewHysteresis(p.Condition(), cfg.Hysteresis)
	}
	return mon
}

// Changes receives a value (coalesced) after any condition changed status.
func (m *Monitor) Changes() <-chan struct{} { return m.changes }

// Conditions returns every condition, in probe order.
func (m *Monitor) Conditions() []Condition {
	m.mu.Lock()
	defer m.mu.Unlock()
	out := make([]Condition, 0, len(m.probes))
	for _, p := range m.probes {
		out = append(out, m.hyst[p.Condition()].Condition())
	}
	return out
}

// Ready reports whether every probe has been sampled at least once.
func (m *Monitor) Ready() bool {
	m.mu.Lock()
	defer m.mu.Unlock()
	return len(m.sampled) == len(m.probes)
}

// Run samples until ctx ends.
func (m *Monitor) Run(ctx context.Context) {
	var wg sync.WaitGroup
	for _, p := range m.probes {
		wg.Go(func() { m.runProbe(ctx, p) })
	}
	wg.Wait()
}

func (m *Monitor) runProbe(ctx context.Context, p Probe) {
	wake := make(chan struct{}, 1)
	if src, ok := p.(EventSource); ok {
		go func() {
			if err := src.Watch(ctx, wake); err != nil {
				m.log.Info("probe events unavailable; polling only", "probe", p.Name(), "reason", err)
			}
		}()
	}
	timer := time.NewTimer(0)
	defer timer.Stop()
	for {
		select {
		case <-ctx.Done():
			return
		case <-wake:
		case <-timer.C:
		}
		next := m.observe(p.Sample(ctx), p)
		timer.Reset(next)
	}
}

// observe feeds a sample into the condition's hysteresis and returns when
// to sample next: the probe's interval, or sooner when a True condition's
// quiet period ends.
func (m *Monitor) observe(s Signal, p Probe) time.Duration {
	if s.Verdict == Unknown {
		m.metrics.ProbeError(p.Name())
	}
	m.mu.Lock()
	h := m.hyst[p.Condition()]
	m.sampled[p.Condition()] = true
	changed := h.Observe(s)
	cond := h.Condition()
	quietUntil := h.QuietUntil()
	m.mu.Unlock()

	m.metrics.SetCondition(cond)
	if changed {
		m.log.Info("condition changed", "condition", cond.Type, "status", cond.Status,
			"reason", cond.Reason, "message", cond.Message)
		select {
		case m.changes <- struct{}{}:
		default:
		}
	}
	next := p.Interval()
	if !quietUntil.IsZero() {
		if d := quietUntil.Sub(m.now()) + 10*time.Millisecond; d < next {
			next = max(d, 10*time.Millisecond)
		}
	}
	return next
}

// SampleOnce samples every probe once, concurrently, in probe order.
func SampleOnce(ctx context.Context, probes []Probe) []Signal {
	out := make([]Signal, len(probes))
	var wg sync.WaitGroup
	for i, p := range probes {
		wg.Go(func() { out[i] = p.Sample(ctx) })
	}
	wg.Wait()
	return out
}
