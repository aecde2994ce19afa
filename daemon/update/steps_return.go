package update

// The steps after the boot, and the ways out: verify, wait until the node
// serves, uncordon; yield; roll back.

import (
	"context"
	"errors"
	"fmt"
	"time"

	corev1 "k8s.io/api/core/v1"

	v1alpha1 "github.com/nodeward/nodeward/api/v1alpha1"
	"github.com/nodeward/nodeward/drain"
)

// maxFailedBoots bounds the retries of a finalization whose boot came up
// on the previous OS.
const maxFailedBoots = 2

func (m *Machine) verifying(ctx context.Context, _ *corev1.Node, _ Desired) (v1alpha1.Step, error) {
	st := &m.state
	ok, reason, err := m.verify(ctx, st.Target)
	if err != nil {
		return v1alpha1.StepVerifying, fmt.Errorf("verify the booted OS: %w", err)
	}
	if ok {
		st.FailedBoots = 0
		return v1alpha1.StepWaitingHealthy, nil
	}
	if st.Disruption.NoReboot {
		// Applied in place: there is no boot to retry and no deployment
		// to roll back to.
		st.Reason = "applied without a reboot, but: " + reason
		return v1alpha1.StepDegraded, nil
	}
	booted, err := m.cfg.OS.Booted(ctx)
	if err != nil {
		return v1alpha1.StepVerifying, fmt.Errorf("read booted OS: %w", err)
	}
	if st.PreviousOS != "" && booted == st.PreviousOS {
		// The new deployment never booted: a reboot before the
		// finalization took, or a failed ostree-finalize-staged. That is
		// no fault of the target; stage it again and retry.
		if st.FailedBoots >= maxFailedBoots {
			st.Reason = fmt.Sprintf("booted the previous OS %s instead of %s %d times: finalization does not take", booted, st.Target, st.FailedBoots+1)
			return v1alpha1.StepDegraded, nil
		}
		st.FailedBoots++
		st.Reason = fmt.Sprintf("booted the previous OS %s instead of %s (attempt %d of %d): staging again", booted, st.Target, st.FailedBoots, maxFailedBoots+1)
		return m.markBoot(v1alpha1.StepFinalizing)
	}
	st.Reason = reason
	st.RollingBack = true
	return m.markBoot(v1alpha1.StepRollingBack)
}

func (m *Machine) waitingHealthy(ctx context.Context, node *corev1.Node, _ Desired) (v1alpha1.Step, error) {
	st := &m.state
	ok, reason, err := m.cfg.Check(ctx, node)
	if err != nil {
		return v1alpha1.StepWaitingHealthy, fmt.Errorf("check health: %w", err)
	}
	if ok {
		st.Reason = ""
		return v1alpha1.StepUncordoning, nil
	}
	if m.cfg.Now().Sub(st.StepSince) > m.cfg.HealthTimeout {
		st.Reason = "not healthy after the update within " + m.cfg.HealthTimeout.String() + ": " + reason
		return v1alpha1.StepDegraded, nil
	}
	st.Reason = reason
	return v1alpha1.StepWaitingHealthy, nil
}

func (m *Machine) uncordoning(ctx context.Context, _ *corev1.Node, _ Desired) (v1alpha1.Step, error) {
	end := m.uncordon
	if !m.state.Cordoned {
		end = m.release
	}
	if err := end(ctx); errors.Is(err, drain.ErrBlocked) {
		m.state.Reason = err.Error()
		return v1alpha1.StepUncordoning, nil // waiting for the drainer, not failing
	} else if err != nil {
		return v1alpha1.StepUncordoning, err
	}
	m.state.Reason = ""
	if m.cfg.Metrics != nil && !m.state.UnavailableSince.IsZero() {
		m.cfg.Metrics.unavailable(m.cfg.Now().Sub(m.state.UnavailableSince))
	}
	return v1alpha1.StepDone, nil
}

// finished is Done and Degraded: both wait for a new target. A Done found
// at the start of an agent process (after a boot, say) is checked once
// against the booted OS: a later boot that went back to the old deployment
// (a rollback by hand, the boot loader's fallback) is not on the target,
// and the update starts again rather than report Done for an OS the node
// does not run.
func (m *Machine) finished(ctx context.Context, node *corev1.Node, want Desired) (v1alpha1.Step, error) {
	if want.Target != "" && want.Target != m.state.Target {
		return m.restart(ctx, node, want)
	}
	if m.state.Step != v1alpha1.StepDone || m.doneChecked || want.Target != m.state.Target || m.desiredProblem != "" {
		return m.state.Step, nil
	}
	onTarget, booted, err := m.runsTarget(ctx, m.state.Target)
	if err != nil {
		return v1alpha1.StepDone, fmt.Errorf("check that the node still runs the target it reported Done for: %w", err)
	}
	m.doneChecked = true
	if onTarget {
		return v1alpha1.StepDone, nil
	}
	m.cfg.Log.Warn("the node reported Done but boots another OS than the target; updating again",
		"target", m.state.Target, "booted", booted)
	return m.restart(ctx, node, want)
}

func (m *Machine) yielding(ctx context.Context, _ *corev1.Node, _ Desired) (v1alpha1.Step, error) {
	if err := m.uncordon(ctx); err != nil {
		return v1alpha1.StepYielding, err
	}
	return v1alpha1.StepYielded, nil
}

// yielded waits for the coordinator to take the grant back, then starts
// over from Staged for a later grant.
func (m *Machine) yielded(ctx context.Context, node *corev1.Node, want Desired) (v1alpha1.Step, error) {
	st := &m.state
	if want.Grant != "" && want.Grant == st.Grant {
		return v1alpha1.StepYielded, nil
	}
	if want.Target != st.Target {
		return m.restart(ctx, node, want)
	}
	st.Grant, st.UnavailableSince, st.DrainSince = "", time.Time{}, time.Time{}
	return v1alpha1.StepStaged, nil
}

func (m *Machine) rollingBack(ctx context.Context, _ *corev1.Node, _ Desired) (v1alpha1.Step, error) {
	if rebooted, err := m.rebooted(); err != nil || rebooted {
		return m.afterBoot(err)
	}
	if err := m.cfg.OS.Rollback(ctx); err != nil {
		return v1alpha1.StepRollingBack, fmt.Errorf("roll back: %w", err)
	}
	return v1alpha1.StepRebooting, nil
}

func (m *Machine) rolledBack(ctx context.Context, _ *corev1.Node, _ Desired) (v1alpha1.Step, error) {
	booted, err := m.cfg.OS.Booted(ctx)
	if err != nil {
		return v1alpha1.StepRolledBack, fmt.Errorf("read booted OS: %w", err)
	}
	if m.state.PreviousOS != "" && booted != m.state.PreviousOS {
		// Never claim a rollback that did not happen.
		m.state.Reason = fmt.Sprintf("rollback failed: booted %s, not the previous %s: %s", orNone(booted), m.state.PreviousOS, m.state.Reason)
		return v1alpha1.StepDegraded, nil
	}
	m.state.Reason = fmt.Sprintf("rolled back to %s: %s", orNone(booted), m.state.Reason)
	// Counted here, once per rollback: the agent leaves RolledBack on this
	// step, too fast for an alert on nodeward_update_step.
	m.cfg.Metrics.rolledBack()
	return v1alpha1.StepDegraded, nil
}

// verify checks that the booted OS is target, with the OS updater's own
// verification when it has one.
func (m *Machine) verify(ctx context.Context, target string) (ok bool, reason string, err error) {
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
func (m *Machine) runsTarget(ctx context.Context, target string) (bool, string, error) {
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

func (m *Machine) uncordon(ctx context.Context) error {
	if !m.state.Cordoned {
		return nil // never undo a cordon nodeward did not set
	}
	if err := m.cfg.Workloads.Uncordon(ctx); err != nil {
		return fmt.Errorf("uncordon: %w", err)
	}
	m.state.Cordoned = false
	return nil
}

// heldBy returns the hooks of point holding the step and, when the drainer
// can, publishes them as the step's condition (Drainable, Rebootable).
func (m *Machine) heldBy(ctx context.Context, node *corev1.Node, point drain.HookPoint) []drain.Hook {
	hooks := point.Hooks(node)
	if err := m.cfg.Workloads.ReportHooks(ctx, point, hooks); err != nil {
		m.cfg.Log.Warn("cannot publish the hook condition", "condition", point.Condition, "error", err)
	}
	return hooks
}

// Serving is the default ServiceCheck: the node serves again by the one
// definition the coordinator counts with (v1alpha1.NotServing), so a node
// the agent reports Done is one the coordinator counts available.
func Serving(_ context.Context, node *corev1.Node) (bool, string, error) {
	if why := v1alpha1.NotServing(node); why != "" {
		return false, why, nil
	}
	return true, "", nil
}
