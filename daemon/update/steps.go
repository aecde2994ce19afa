package update

import (
	"context"
	"fmt"

	corev1 "k8s.io/api/core/v1"

	"github.com/nodeward/nodeward/api/v1alpha1"
	"github.com/nodeward/nodeward/drain"
)

// stepFunc performs the action of one step and returns the next step (the
// same step while it waits). Each action is idempotent: it may run again
// after a crash.
type stepFunc func(ctx context.Context, node *corev1.Node, want Desired) (v1alpha1.Step, error)

// steps maps every step to its action; the table is the state machine.
func (m *Machine) steps() map[v1alpha1.Step]stepFunc {
	return map[v1alpha1.Step]stepFunc{
		v1alpha1.StepIdle:           m.idle,
		v1alpha1.StepStaging:        m.staging,
		v1alpha1.StepStaged:         m.staged,
		v1alpha1.StepGranted:        m.granted,
		v1alpha1.StepHooksPreDrain:  m.hooksPreDrain,
		v1alpha1.StepCordoning:      m.cordoning,
		v1alpha1.StepDraining:       m.draining,
		v1alpha1.StepHooksPreReboot: m.hooksPreReboot,
		v1alpha1.StepFinalizing:     m.finalizing,
		v1alpha1.StepRebooting:      m.rebooting,
		v1alpha1.StepVerifying:      m.verifying,
		v1alpha1.StepWaitingHealthy: m.waitingHealthy,
		v1alpha1.StepUncordoning:    m.uncordoning,
		v1alpha1.StepDone:           m.finished,
		v1alpha1.StepDegraded:       m.finished,
		v1alpha1.StepYielding:       m.yielding,
		v1alpha1.StepYielded:        m.yielded,
		v1alpha1.StepRollingBack:    m.rollingBack,
		v1alpha1.StepRolledBack:     m.rolledBack,
	}
}

// run performs the action of the current step.
func (m *Machine) run(ctx context.Context, node *corev1.Node, want Desired) (v1alpha1.Step, error) {
	step, ok := m.table[m.state.Step]
	if !ok {
		return m.state.Step, fmt.Errorf("unknown step %q", m.state.Step)
	}
	return step(ctx, node, want)
}

// idle starts an update when the pool's target differs from the booted OS.
func (m *Machine) idle(ctx context.Context, node *corev1.Node, want Desired) (v1alpha1.Step, error) {
	if want.Target == "" {
		return v1alpha1.StepIdle, nil
	}
	onTarget, booted, err := m.runsTarget(ctx, want.Target)
	if err != nil {
		return v1alpha1.StepIdle, err
	}
	st := &m.state
	fresh := State{Step: v1alpha1.StepIdle, Target: want.Target, StepSince: st.StepSince, LastGrant: st.LastGrant,
		Cordoned: st.Cordoned || cordonedByNodeward(node)}
	if !onTarget {
		// A new update never inherits a grant (it takes one in Staged,
		// issued for its target) nor a cordon (see restart).
		if err := m.liftOwnCordon(ctx, node); err != nil {
			return v1alpha1.StepIdle, err
		}
		fresh.Cordoned, fresh.PreviousOS = false, booted
		*st = fresh
		return v1alpha1.StepStaging, nil
	}
	// Already there: a new node, or an update that finished before its
	// state was lost. Finish it as the update would have: keep a grant
	// issued for this target so that Done releases it, and lift
	// nodeward's own cordon after the health check.
	*st = fresh
	if m.unusableGrant(want) == "" && want.Grant != "" {
		st.Grant, st.ReleaseAtDone = want.Grant, want.ReleaseAtDone
	}
	if st.Grant != "" || st.Cordoned {
		return v1alpha1.StepWaitingHealthy, nil
	}
	return v1alpha1.StepDone, nil
}

// liftOwnCordon uncordons the node if nodeward's own cordon is on it (an
// admin's is never touched).
func (m *Machine) liftOwnCordon(ctx context.Context, node *corev1.Node) error {
	if !m.state.Cordoned && !cordonedByNodeward(node) {
		return nil
	}
	if err := m.cfg.Workloads.Uncordon(ctx); err != nil {
		return fmt.Errorf("lift nodeward's cordon before a new update: %w", err)
	}
	m.state.Cordoned = false
	return nil
}

// cordonedByNodeward reports whether node seems to carry nodeward's own
// cordon: its record, and no other manager named for spec.unschedulable
// (an admin's uncordon and cordon leave the record). The uncordon itself
// (drain.Uncordon) decides on a fresh read with drain.CordonedByNodeward.
func cordonedByNodeward(node *corev1.Node) bool {
	return drain.HasCordonRecord(node) && node.Spec.Unschedulable && !drain.CordonTakenOver(node)
}

// restart abandons a finished or not yet disruptive update for a new target.
func (m *Machine) restart(ctx context.Context, node *corev1.Node, want Desired) (v1alpha1.Step, error) {
	// A degraded node keeps nodeward's cordon until the target changes.
	// A new update starts from a node in service: the coordinator counts a
	// cordoned node unavailable and would never grant it (the protocol
	// simulator found the deadlock).
	if err := m.liftOwnCordon(ctx, node); err != nil {
		return m.state.Step, err
	}
	last := m.state.Grant
	if last == "" {
		last = m.state.LastGrant
	}
	m.state = State{Step: m.state.Step, StepSince: m.state.StepSince, Cordoned: m.state.Cordoned, LastGrant: last}
	return m.idle(ctx, node, want)
}
