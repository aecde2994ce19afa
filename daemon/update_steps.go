package daemon

import (
	"context"
	"errors"
	"fmt"
	"time"

	corev1 "k8s.io/api/core/v1"

	"github.com/nodeward/nodeward/api/v1alpha1"
	"github.com/nodeward/nodeward/drain"
)

// run performs the action of the current step and returns the next step
// (the same step while it waits). Each action is idempotent: it may run
// again after a crash.
func (m *UpdateMachine) run(ctx context.Context, node *corev1.Node, want Desired) (Step, error) {
	st := &m.state
	switch st.Step {
	case StepIdle:
		return m.idle(ctx, want)
	case StepStaging:
		if want.Target != st.Target {
			return m.restart(ctx, want)
		}
		if m.cfg.StageAfterDrain {
			return StepStaged, nil // staged in Finalizing, after the drain
		}
		if err := m.cfg.OS.Stage(ctx, st.Target); err != nil {
			return StepStaging, fmt.Errorf("stage %s: %w", st.Target, err)
		}
		// Staged before the slot unless the grant arrived first.
		st.StagedBeforeSlot = want.Grant == ""
		return StepStaged, nil
	case StepStaged:
		if want.Target != st.Target {
			return m.restart(ctx, want)
		}
		if want.Grant == "" {
			return StepStaged, nil
		}
		st.Grant = want.Grant
		if m.cfg.Metrics != nil {
			m.cfg.Metrics.granted(st.StagedBeforeSlot)
		}
		return StepGranted, nil
	case StepGranted:
		if want.Grant == "" {
			return StepStaged, nil // grant withdrawn before any disruption
		}
		return StepHooksPreDrain, nil
	case StepHooksPreDrain:
		if want.Grant == "" {
			return StepStaged, nil
		}
		if hooks := m.heldBy(ctx, node, drain.PreDrain); len(hooks) > 0 {
			st.Reason = "waiting: " + drain.PreDrain.Describe(hooks)
			return StepHooksPreDrain, nil
		}
		st.Reason = ""
		return StepCordoning, nil
	case StepCordoning:
		byUs, err := m.cfg.Drain.Cordon(ctx)
		if err != nil {
			return StepCordoning, fmt.Errorf("cordon: %w", err)
		}
		if !byUs {
			st.Reason = "node was cordoned by someone else; nodeward leaves it alone"
			return StepYielding, nil
		}
		st.Cordoned = true
		return StepDraining, nil
	case StepDraining:
		return m.drain(ctx, want)
	case StepHooksPreReboot:
		if hooks := m.heldBy(ctx, node, drain.PreReboot); len(hooks) > 0 {
			st.Reason = "waiting: " + drain.PreReboot.Describe(hooks)
			return StepHooksPreReboot, nil
		}
		st.Reason = ""
		// The boot ID goes on disk before finalizing: rpm-ostree may
		// reboot by itself as soon as the deployment is unlocked.
		return m.markBoot(StepFinalizing)
	case StepFinalizing:
		return m.finalize(ctx)
	case StepRebooting:
		return m.reboot(ctx)
	case StepVerifying:
		ok, reason, err := m.verify(ctx, st.Target)
		if err != nil {
			return StepVerifying, fmt.Errorf("verify the booted OS: %w", err)
		}
		if !ok {
			st.Reason = reason
			st.RollingBack = true
			return m.markBoot(StepRollingBack)
		}
		return StepWaitingHealthy, nil
	case StepWaitingHealthy:
		ok, reason, err := m.cfg.Health(ctx, node)
		if err != nil {
			return StepWaitingHealthy, fmt.Errorf("check health: %w", err)
		}
		if ok {
			st.Reason = ""
			return StepUncordoning, nil
		}
		if m.cfg.Now().Sub(st.StepSince) > m.cfg.HealthTimeout {
			st.Reason = "not healthy after the update within " + m.cfg.HealthTimeout.String() + ": " + reason
			return StepDegraded, nil
		}
		st.Reason = reason
		return StepWaitingHealthy, nil
	case StepUncordoning:
		if err := m.uncordon(ctx); err != nil {
			return StepUncordoning, err
		}
		if m.cfg.Metrics != nil && !st.UnavailableSince.IsZero() {
			m.cfg.Metrics.unavailable(m.cfg.Now().Sub(st.UnavailableSince))
		}
		return StepDone, nil
	case StepDone, StepDegraded:
		if want.Target != "" && want.Target != st.Target {
			return m.restart(ctx, want)
		}
		return st.Step, nil
	case StepYielding:
		if err := m.uncordon(ctx); err != nil {
			return StepYielding, err
		}
		return StepYielded, nil
	case StepYielded:
		// Wait for the coordinator to take the grant back, then start
		// over from Staged for a later grant.
		if want.Grant != "" && want.Grant == st.Grant {
			return StepYielded, nil
		}
		if want.Target != st.Target {
			return m.restart(ctx, want)
		}
		st.Grant, st.UnavailableSince, st.DrainSince = "", time.Time{}, time.Time{}
		return StepStaged, nil
	case StepRollingBack:
		if rebooted, err := m.rebooted(); err != nil || rebooted {
			return m.afterBoot(err)
		}
		if err := m.cfg.OS.Rollback(ctx); err != nil {
			return StepRollingBack, fmt.Errorf("roll back: %w", err)
		}
		return StepRebooting, nil
	case StepRolledBack:
		booted, err := m.cfg.OS.Booted(ctx)
		if err != nil {
			return StepRolledBack, fmt.Errorf("read booted OS: %w", err)
		}
		st.Reason = fmt.Sprintf("rolled back to %s: %s", orNone(booted), st.Reason)
		return StepDegraded, nil
	}
	return st.Step, fmt.Errorf("unknown step %q", st.Step)
}

// idle starts an update when the pool's target differs from the booted OS.
func (m *UpdateMachine) idle(ctx context.Context, want Desired) (Step, error) {
	if want.Target == "" {
		return StepIdle, nil
	}
	onTarget, booted, err := m.runsTarget(ctx, want.Target)
	if err != nil {
		return StepIdle, err
	}
	st := &m.state
	if onTarget {
		// Already there (a new node, or an update finished before a state
		// loss): report Done so that a grant is released at once.
		*st = State{Step: StepIdle, Target: want.Target, StepSince: st.StepSince}
		return StepDone, nil
	}
	*st = State{Step: StepIdle, Target: want.Target, PreviousOS: booted, StepSince: st.StepSince, Grant: want.Grant}
	return StepStaging, nil
}

// restart abandons a finished or not yet disruptive update for a new target.
func (m *UpdateMachine) restart(ctx context.Context, want Desired) (Step, error) {
	if m.state.Cordoned {
		// A degraded node keeps nodeward's cordon; the new update will
		// find its own record and carry on from there.
		m.cfg.Log.Info("new target while nodeward's cordon is in place", "target", want.Target)
	}
	cordoned := m.state.Cordoned
	m.state = State{Step: m.state.Step, StepSince: m.state.StepSince, Cordoned: cordoned}
	return m.idle(ctx, want)
}

func (m *UpdateMachine) drain(ctx context.Context, want Desired) (Step, error) {
	st := &m.state
	if st.DrainSince.IsZero() {
		st.DrainSince = m.cfg.Now()
	}
	attempt, cancel := context.WithTimeout(ctx, m.cfg.DrainAttempt)
	err := m.cfg.Drain.Drain(attempt)
	cancel()
	if err == nil {
		st.Reason = ""
		return StepHooksPreReboot, nil
	}
	timeout := m.cfg.DrainTimeout
	if want.DrainTimeout > 0 {
		timeout = want.DrainTimeout
	}
	blockedFor := m.cfg.Now().Sub(st.DrainSince)
	st.Reason = "drain: " + err.Error()
	if want.ForceOnDrainTimeout && blockedFor > timeout {
		if fd, ok := m.cfg.Drain.(ForceDrainer); ok {
			// The forced drain first lets evictions work for forceAfter;
			// its attempt must outlast that or it never gets to force.
			attempt, cancel := context.WithTimeout(ctx, forceAfter+m.cfg.DrainAttempt)
			ferr := fd.ForceDrain(attempt)
			cancel()
			if ferr == nil {
				st.Reason = ""
				// The drain package recorded a DrainForced Event per pod.
				m.cfg.Log.Warn("drain forced: blocking pods deleted without eviction (pool onTimeout Force)",
					"blockedFor", blockedFor.Round(time.Second), "blockedBy", err)
				return StepHooksPreReboot, nil
			}
			err = ferr
		}
	}
	if want.YieldOnDrainTimeout && blockedFor > timeout {
		st.Reason = fmt.Sprintf("drain blocked for %s: %v", blockedFor.Round(1e9), err)
		return StepYielding, nil
	}
	if errors.Is(err, ErrDrainBlocked) || errors.Is(err, context.DeadlineExceeded) {
		return StepDraining, nil // waiting, not failing
	}
	return StepDraining, fmt.Errorf("drain: %w", err)
}

func (m *UpdateMachine) finalize(ctx context.Context) (Step, error) {
	if rebooted, err := m.rebooted(); err != nil || rebooted {
		return m.afterBoot(err) // finalization rebooted the machine
	}
	if m.cfg.StageAfterDrain {
		if err := m.cfg.OS.Stage(ctx, m.state.Target); err != nil {
			return StepFinalizing, fmt.Errorf("stage %s: %w", m.state.Target, err)
		}
	}
	if err := m.cfg.OS.Finalize(ctx, m.state.Target); err != nil {
		return StepFinalizing, fmt.Errorf("finalize %s: %w", m.state.Target, err)
	}
	return StepRebooting, nil
}

// markBoot records the current boot ID and moves to next. From then on a
// different boot ID proves the machine rebooted, and the same one that it
// did not, whatever the agent did in between: the reboot is never asked
// for again once it happened.
func (m *UpdateMachine) markBoot(next Step) (Step, error) {
	id, err := m.cfg.BootID()
	if err != nil {
		return m.state.Step, fmt.Errorf("read boot ID: %w", err)
	}
	m.state.BootID = id
	return next, nil
}

// rebooted reports whether the machine booted since markBoot.
func (m *UpdateMachine) rebooted() (bool, error) {
	id, err := m.cfg.BootID()
	if err != nil {
		return false, fmt.Errorf("read boot ID: %w", err)
	}
	return id != m.state.BootID, nil
}

// afterBoot is the step after the reboot: verification, or after a
// rollback the report of it.
func (m *UpdateMachine) afterBoot(err error) (Step, error) {
	if err != nil {
		return m.state.Step, err
	}
	m.state.BootID = ""
	if m.state.RollingBack {
		m.state.RollingBack = false
		return StepRolledBack, nil
	}
	return StepVerifying, nil
}

func (m *UpdateMachine) reboot(ctx context.Context) (Step, error) {
	if rebooted, err := m.rebooted(); err != nil || rebooted {
		return m.afterBoot(err)
	}
	now := m.cfg.Now()
	if !m.rebootAsked.IsZero() && now.Sub(m.rebootAsked) < m.cfg.RebootRetry {
		return StepRebooting, nil // asked already; waiting to go down
	}
	m.rebootAsked = now
	if err := m.cfg.Reboot.Reboot(ctx, "nodeward: boot "+orNone(m.state.Target)); err != nil {
		m.rebootAsked = time.Time{}
		return StepRebooting, fmt.Errorf("reboot: %w", err)
	}
	return StepRebooting, nil
}

// verify checks that the booted OS is target, with the OS updater's own
// verification when it has one.
func (m *UpdateMachine) verify(ctx context.Context, target string) (ok bool, reason string, err error) {
	if v, has := m.cfg.OS.(OSVerifier); has {
		return v.VerifyBooted(ctx, target)
	}
	booted, err := m.cfg.OS.Booted(ctx)
	if err != nil {
		return false, "", fmt.Errorf("read booted OS: %w", err)
	}
	if booted != target {
		return false, fmt.Sprintf("booted %s instead of the target %s", orNone(booted), target), nil
	}
	return true, "", nil
}

// runsTarget reports whether the booted OS already is target, comparing
// canonical forms when the OS updater knows them.
func (m *UpdateMachine) runsTarget(ctx context.Context, target string) (bool, string, error) {
	booted, err := m.cfg.OS.Booted(ctx)
	if err != nil {
		return false, "", fmt.Errorf("read booted OS: %w", err)
	}
	if c, has := m.cfg.OS.(Canonicalizer); has {
		canon, err := c.Canonical(target)
		if err != nil {
			return false, booted, fmt.Errorf("target %q: %w", target, err)
		}
		return booted == canon, booted, nil
	}
	return booted == target, booted, nil
}

func (m *UpdateMachine) uncordon(ctx context.Context) error {
	if !m.state.Cordoned {
		return nil // never undo a cordon nodeward did not set
	}
	if err := m.cfg.Drain.Uncordon(ctx); err != nil {
		return fmt.Errorf("uncordon: %w", err)
	}
	m.state.Cordoned = false
	return nil
}

// heldBy returns the hooks of point holding the step and, when the drainer
// can, publishes them as the step's condition (Drainable, Rebootable).
func (m *UpdateMachine) heldBy(ctx context.Context, node *corev1.Node, point drain.HookPoint) []drain.Hook {
	hooks := point.Hooks(node)
	if r, ok := m.cfg.Drain.(HookReporter); ok {
		if err := r.ReportHooks(ctx, point, hooks); err != nil {
			m.cfg.Log.Warn("cannot publish the hook condition", "condition", point.Condition, "error", err)
		}
	}
	return hooks
}

// DefaultHealthCheck: the node is Ready and none of nodeward's health
// conditions is True.
func DefaultHealthCheck(_ context.Context, node *corev1.Node) (bool, string, error) {
	ready := false
	for _, c := range node.Status.Conditions {
		if c.Type == corev1.NodeReady {
			ready = c.Status == corev1.ConditionTrue
		}
	}
	if !ready {
		return false, "node not Ready", nil
	}
	for _, t := range v1alpha1.HealthConditions() {
		for _, c := range node.Status.Conditions {
			if c.Type == t && c.Status == corev1.ConditionTrue {
				return false, string(t) + " is True", nil
			}
		}
	}
	return true, "", nil
}
