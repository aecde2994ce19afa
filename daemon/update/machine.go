package update

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"os"
	"time"

	v1alpha1 "github.com/nodeward/nodeward/api/v1alpha1"
	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/types"
)

// Config wires the update machine. Store, Node, Protocol, OS, Reboot,
// BootID and Workloads are required; the rest have defaults.
type Config struct {
	Store     StateStore
	Node      NodeSource
	Protocol  Protocol
	OS        OSUpdater
	Reboot    Rebooter
	BootID    BootIDFunc
	Workloads Workloads

	// Check decides when a rebooted node is back in service; Serving
	// (v1alpha1.NotServing) when nil.
	Check  ServiceCheck
	Events EventSink
	Status StatusSink
	// Metrics receives step changes; nil records nothing.
	Metrics *Metrics
	Log     *slog.Logger

	// Wake is signalled when the node changed; the machine also polls
	// every PollInterval (default 5 s) while it waits.
	Wake         <-chan struct{}
	PollInterval time.Duration
	// DrainTimeout bounds a blocked drain before the slot is yielded (if
	// the pool asks for that); default 10 min.
	DrainTimeout time.Duration
	// DrainAttempt bounds one drain attempt; default 30 s. A blocked
	// attempt ends with the blockers in the node's reason, so this is also
	// how stale that reason may be.
	DrainAttempt time.Duration
	// HealthTimeout bounds WaitingHealthy before Degraded; default 10 min.
	HealthTimeout time.Duration
	// RebootRetry is how long to wait for the machine to go down before
	// asking again; default 5 min.
	RebootRetry time.Duration
	// Now is the clock; time.Now when nil.
	Now func() time.Time
	// Heartbeat is called with busy true as a step's action starts and
	// with false when it ends and on every idle turn; the agent's watchdog
	// follows it. Optional.
	Heartbeat func(busy bool)
	// DebugWedgeFile, for tests of the watchdog only: while this file
	// exists the loop stops turning (and beating), as a wedged loop would.
	DebugWedgeFile string
	// CriticalTimeout bounds a critical step (Finalizing, RollingBack): it
	// is not cut by the agent's shutdown but runs to its end, at most this
	// long, and is persisted before Run returns. Default 4 min, inside the
	// unit's TimeoutStopSec of 5 min.
	CriticalTimeout time.Duration
	// StageAfterDrain downloads the target only after the drain, inside
	// the unavailable window, as the machine-config-daemon does. It exists
	// to measure what pre-staging saves; never use it in production.
	StageAfterDrain bool
}

// Machine runs the persisted update lifecycle of one node.
type Machine struct {
	cfg   Config
	state State
	// saved is the last state written to the file and reported; a step
	// whose state differs is persisted before the machine acts again.
	saved    State
	reported bool
	loaded   bool
	// rebootAsked is when this process last asked for a reboot; never
	// persisted, so a restarted agent asks again only if the boot ID
	// proves the machine did not reboot.
	rebootAsked time.Time
	// doneChecked: this process checked a Done state against the booted
	// OS (once per process: a boot restarts the agent).
	doneChecked bool
	// nodeUID is the UID of the Node object last read.
	nodeUID types.UID
	// desiredProblem is the last error reading the coordinator's wishes,
	// reported once.
	desiredProblem string
	// failingSince is when the current run of step errors began (zero
	// while steps succeed), for an ErrorReporter.
	failingSince time.Time
	synced       chan struct{}
	table        map[v1alpha1.Step]stepFunc
}

// NewMachine checks cfg and fills in defaults.
func NewMachine(cfg Config) (*Machine, error) {
	switch {
	case cfg.Store == nil:
		return nil, errors.New("update machine: Store is required")
	case cfg.Node == nil, cfg.Protocol == nil, cfg.OS == nil, cfg.Reboot == nil, cfg.BootID == nil, cfg.Workloads == nil:
		return nil, errors.New("update machine: Node, Protocol, OS, Reboot, BootID and Workloads are required")
	}
	if cfg.Check == nil {
		cfg.Check = Serving
	}
	if cfg.Log == nil {
		cfg.Log = slog.Default()
	}
	if cfg.Now == nil {
		cfg.Now = time.Now
	}
	if cfg.Heartbeat == nil {
		cfg.Heartbeat = func(bool) {}
	}
	defaults := []struct {
		d   *time.Duration
		def time.Duration
	}{
		{&cfg.PollInterval, 5 * time.Second}, {&cfg.DrainTimeout, 10 * time.Minute},
		{&cfg.DrainAttempt, 30 * time.Second}, {&cfg.HealthTimeout, 10 * time.Minute},
		{&cfg.RebootRetry, 5 * time.Minute}, {&cfg.CriticalTimeout, 4 * time.Minute},
	}
	for _, d := range defaults {
		if *d.d <= 0 {
			*d.d = d.def
		}
	}
	m := &Machine{cfg: cfg, synced: make(chan struct{})}
	m.table = m.steps()
	return m, nil
}

// State returns the current state (for status and tests).
func (m *Machine) State() State { return m.state }

// Synced is closed once the machine has loaded its state and reported it:
// the agent is ready from then on.
func (m *Machine) Synced() <-chan struct{} { return m.synced }

// Run drives the machine until ctx ends. Errors of one step are logged and
// the step is retried after the poll interval.
func (m *Machine) Run(ctx context.Context) error {
	for {
		m.wedgeForTests(ctx)
		m.cfg.Heartbeat(true)
		progressed, err := m.Advance(ctx)
		m.cfg.Heartbeat(false)
		if ctx.Err() != nil {
			return nil
		}
		if err != nil {
			m.cfg.Log.Warn("update step failed; retrying", "step", m.state.Step, "err", err)
		}
		if progressed && err == nil {
			continue
		}
		select {
		case <-ctx.Done():
			return nil
		case <-m.cfg.Wake:
		case <-time.After(m.cfg.PollInterval):
		}
	}
}

// wedgeForTests blocks, without a heartbeat, while DebugWedgeFile exists.
func (m *Machine) wedgeForTests(ctx context.Context) {
	if m.cfg.DebugWedgeFile == "" {
		return
	}
	for {
		if _, err := os.Stat(m.cfg.DebugWedgeFile); err != nil {
			return
		}
		select {
		case <-ctx.Done():
			return
		case <-time.After(200 * time.Millisecond):
		}
	}
}

// Advance runs the current step once. It returns true when the step moved
// the machine to another step, false when it waits. The new state is
// persisted (state file, then node annotations) before Advance returns, so
// the next step acts only once its name is on disk.
func (m *Machine) Advance(ctx context.Context) (progressed bool, err error) {
	if !m.loaded {
		st, err := m.cfg.Store.Load()
		if err != nil {
			return false, err
		}
		if st.StepSince.IsZero() {
			st.StepSince = m.cfg.Now()
		}
		m.state, m.saved, m.loaded = st, st, true
		m.cfg.Log.Info("update state loaded", "step", st.Step, "target", st.Target)
	}
	node, err := m.cfg.Node.Node(ctx)
	if err != nil {
		return false, fmt.Errorf("get node: %w", err)
	}
	if !m.reported || node.UID != m.nodeUID {
		// After a restart the annotations may lag the file (a crash
		// between the two writes), and a Node deleted and created again
		// carries none of the report (the protocol simulator found the
		// stall): report before acting.
		if err := m.cfg.Protocol.Report(ctx, m.state); err != nil {
			return false, fmt.Errorf("report update state: %w", err)
		}
		m.reported, m.nodeUID = true, node.UID
		m.publish(nil, m.state.Step)
	}
	// Ready once the state is loaded and reported: the first step may be
	// a 30 s drain attempt, and READY=1 must not wait for it.
	m.markSynced()
	desired, err := m.cfg.Protocol.Desired(ctx, node)
	if err != nil {
		desired = m.holdPosition(node, err)
	} else {
		m.desiredProblem = ""
	}
	from := m.state.Step
	stepCtx, done := m.stepContext(ctx, from)
	defer done()
	next, stepErr := m.run(stepCtx, node, desired)
	if next != from {
		m.enter(next)
	}
	if err := m.persist(stepCtx); err != nil {
		return false, err
	}
	m.reportError(stepCtx, stepErr)
	if next != from {
		m.announce(node, from, next)
	}
	m.markSynced()
	return next != from, stepErr
}

// reportError tells a protocol that publishes failures (ErrorReporter)
// how the step went: the error and since when the steps have been failing,
// or nil once one succeeds.
func (m *Machine) reportError(ctx context.Context, err error) {
	r, ok := m.cfg.Protocol.(ErrorReporter)
	if !ok {
		return
	}
	switch {
	case err == nil:
		m.failingSince = time.Time{}
	case m.failingSince.IsZero():
		m.failingSince = m.cfg.Now()
	}
	if rerr := r.ReportError(ctx, m.state, err, m.failingSince); rerr != nil {
		m.cfg.Log.Warn("cannot report the failing step", "step", m.state.Step, "err", rerr)
	}
}

// stepContext is ctx, except for a critical step (Step.Critical:
// finalizing or rolling back the deployment), which the agent's shutdown
// must not cut in half: it runs on after ctx ends, bounded by
// CriticalTimeout, and its result is persisted before Run returns.
func (m *Machine) stepContext(ctx context.Context, step v1alpha1.Step) (context.Context, context.CancelFunc) {
	if step.Critical() {
		return context.WithTimeout(context.WithoutCancel(ctx), m.cfg.CriticalTimeout)
	}
	return ctx, func() {}
}

// holdPosition is what the machine acts on while the coordinator's wishes
// cannot be read (a malformed annotation, an unreadable MachineConfig): its
// own target and grant, no yield and no force. Every step then carries on
// as far as it safely can — an update in flight finishes, uncordons and
// reports — and nothing new starts. The problem is logged and recorded as a
// Warning Event once per distinct message.
func (m *Machine) holdPosition(node *corev1.Node, err error) Desired {
	if msg := err.Error(); msg != m.desiredProblem {
		m.desiredProblem = msg
		m.cfg.Log.Warn("cannot read the coordinator's wishes; finishing what is safe without them", "step", m.state.Step, "err", err)
		if m.cfg.Events != nil {
			m.cfg.Events.Event(node, true, "BadCoordinatorAnnotation", "ignored until fixed, the update holds its position: "+msg)
		}
	}
	return Desired{Target: m.state.Target, Grant: m.state.Grant, GrantTarget: m.state.Target}
}

func (m *Machine) markSynced() {
	select {
	case <-m.synced:
	default:
		close(m.synced)
	}
}

// enter switches to step next, keeping the per-update fields.
func (m *Machine) enter(next v1alpha1.Step) {
	now := m.cfg.Now()
	if m.cfg.Metrics != nil {
		m.cfg.Metrics.stepDone(m.state.Step, now.Sub(m.state.StepSince))
	}
	if next.Disrupting() && m.state.UnavailableSince.IsZero() {
		m.state.UnavailableSince = now
	}
	m.state.Step, m.state.StepSince = next, now
}

// persist writes the state file and then the annotations when the state
// changed since the last write.
func (m *Machine) persist(ctx context.Context) error {
	if m.state == m.saved {
		return nil
	}
	if err := m.cfg.Store.Save(m.state); err != nil {
		return err
	}
	m.saved = m.state
	if err := m.cfg.Protocol.Report(ctx, m.state); err != nil {
		m.reported = false
		return fmt.Errorf("report update state: %w", err)
	}
	return nil
}

func (m *Machine) announce(node *corev1.Node, from, to v1alpha1.Step) {
	st := m.state
	m.cfg.Log.Info("update step", "from", from, "to", to, "target", st.Target, "reason", st.Reason)
	if m.cfg.Events != nil {
		msg := fmt.Sprintf("update to %s: %s → %s", orNone(st.Target), from, to)
		if st.Reason != "" && stepNotices[to].reasonInEvent {
			msg += ": " + st.Reason
		}
		m.cfg.Events.Event(node, to.Warning(), "Update"+string(to), msg)
	}
	m.publish(node, to)
}

func (m *Machine) publish(_ *corev1.Node, step v1alpha1.Step) {
	if m.cfg.Metrics != nil {
		m.cfg.Metrics.setStep(step)
	}
	if m.cfg.Status != nil {
		line := "update: " + string(step)
		if m.state.Target != "" {
			line += " (target " + m.state.Target + ")"
		}
		if m.state.Reason != "" && stepNotices[step].reasonInStatus {
			line += ": " + m.state.Reason
		}
		m.cfg.Status.Status(line)
	}
}

func orNone(s string) string {
	if s == "" {
		return "(none)"
	}
	return s
}
