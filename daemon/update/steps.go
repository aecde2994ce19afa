package update

import (
	"context"
	"errors"
	"fmt"
	"time"

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

func (m *Machine) staging(ctx context.Context, node *corev1.Node, want Desired) (v1alpha1.Step, error) {
	st := &m.state
	if want.Target != st.Target {
		return m.restart(ctx, node, want)
	}
	if m.cfg.StageAfterDrain {
		return v1alpha1.StepStaged, nil // staged in Finalizing, after the drain
	}
	if err := m.stage(ctx); err != nil {
		return v1alpha1.StepStaging, err
	}
	// Staged before the slot unless the grant arrived first.
	st.StagedBeforeSlot = want.Grant == ""
	return v1alpha1.StepStaged, nil
}

// stage stages the target and records the boot it was staged in.
func (m *Machine) stage(ctx context.Context) error {
	id, err := m.cfg.BootID()
	if err != nil {
		return fmt.Errorf("read boot ID: %w", err)
	}
	if err := m.cfg.OS.Stage(ctx, m.state.Target); err != nil {
		return fmt.Errorf("stage %s: %w", m.state.Target, err)
	}
	m.state.StagedBootID = id
	return nil
}

// stagingLost reports whether the machine booted since the target was
// staged: a finalization-locked deployment does not survive a reboot.
func (m *Machine) stagingLost() (bool, error) {
	if m.state.StagedBootID == "" {
		return false, nil // staged by an agent that did not record the boot
	}
	id, err := m.cfg.BootID()
	if err != nil {
		return false, fmt.Errorf("read boot ID: %w", err)
	}
	return id != m.state.StagedBootID, nil
}

func (m *Machine) staged(ctx context.Context, node *corev1.Node, want Desired) (v1alpha1.Step, error) {
	st := &m.state
	if want.Target != st.Target {
		return m.restart(ctx, node, want)
	}
	if lost, err := m.stagingLost(); err != nil || lost {
		st.Reason = "the staged deployment did not survive a reboot: staging again"
		return v1alpha1.StepStaging, err
	}
	if want.Grant == "" {
		return v1alpha1.StepStaged, nil
	}
	if why := m.unusableGrant(want); why != "" {
		// Give the grant back at once rather than hold a slot it will
		// never use: the coordinator releases a Yielded grant.
		st.Grant, st.Reason = want.Grant, why
		return v1alpha1.StepYielded, nil
	}
	st.Grant, st.Reason = want.Grant, ""
	if m.cfg.Metrics != nil {
		m.cfg.Metrics.granted(st.StagedBeforeSlot)
	}
	return v1alpha1.StepGranted, nil
}

// unusableGrant says why the machine does not take want's grant, "" when
// it does: there is none, it was issued for another target than the one
// staged, or it is the grant of the previous update.
func (m *Machine) unusableGrant(want Desired) string {
	switch {
	case want.Grant == "":
		return ""
	case want.GrantTarget != m.state.Target:
		return fmt.Sprintf("grant %s was issued for target %q, not the staged %q: waiting for a grant for this target",
			want.Grant, want.GrantTarget, m.state.Target)
	case want.Grant == m.state.LastGrant:
		return fmt.Sprintf("grant %s was used for the previous update: waiting for a new grant", want.Grant)
	}
	return ""
}

// slotStillHeld checks, before any disruption, that the grant taken is
// still the coordinator's and the staged deployment still there; if not,
// the machine goes back to Staged (or Staging) without having disrupted
// anything.
func (m *Machine) slotStillHeld(want Desired) (v1alpha1.Step, bool, error) {
	if want.Grant == "" || want.Grant != m.state.Grant {
		m.state.Grant = ""
		return v1alpha1.StepStaged, false, nil // grant withdrawn before any disruption
	}
	if lost, err := m.stagingLost(); err != nil || lost {
		return v1alpha1.StepStaging, false, err
	}
	return "", true, nil
}

func (m *Machine) granted(_ context.Context, _ *corev1.Node, want Desired) (v1alpha1.Step, error) {
	if next, ok, err := m.slotStillHeld(want); !ok {
		return next, err
	}
	return v1alpha1.StepHooksPreDrain, nil
}

func (m *Machine) hooksPreDrain(ctx context.Context, node *corev1.Node, want Desired) (v1alpha1.Step, error) {
	if next, ok, err := m.slotStillHeld(want); !ok {
		return next, err
	}
	if hooks := m.heldBy(ctx, node, drain.PreDrain); len(hooks) > 0 {
		m.state.Reason = "waiting: " + drain.PreDrain.Describe(hooks)
		return v1alpha1.StepHooksPreDrain, nil
	}
	m.state.Reason = ""
	return v1alpha1.StepCordoning, nil
}

func (m *Machine) cordoning(ctx context.Context, node *corev1.Node, _ Desired) (v1alpha1.Step, error) {
	if len(drain.PreDrain.Hooks(node)) > 0 {
		return v1alpha1.StepHooksPreDrain, nil // a hook came back since it was checked
	}
	byUs, err := m.cfg.Workloads.Cordon(ctx)
	if err != nil {
		return v1alpha1.StepCordoning, fmt.Errorf("cordon: %w", err)
	}
	if !byUs {
		m.state.Reason = "node was cordoned by someone else; nodeward leaves it alone"
		return v1alpha1.StepYielding, nil
	}
	m.state.Cordoned, m.state.NodeUID = true, string(node.UID)
	return v1alpha1.StepDraining, nil
}

// disruptionStillOurs checks, between the cordon and the reboot, that the
// Node is the object nodeward cordoned, still cordoned, and still granted
// the slot; otherwise the reboot must not happen on this drain. It returns
// the step to go back to, or "" when all holds.
func (m *Machine) disruptionStillOurs(node *corev1.Node, want Desired) v1alpha1.Step {
	st := &m.state
	switch {
	case st.NodeUID != "" && string(node.UID) != st.NodeUID:
		// A new object: not cordoned, not drained, no grant. Nothing of
		// this update's disruption holds; start over from Staged.
		st.Cordoned, st.Grant, st.NodeUID, st.DrainSince = false, "", "", time.Time{}
		st.Reason = "the Node object was deleted and created again mid-update: its drain is void"
		return v1alpha1.StepStaged
	case want.Grant != st.Grant && !st.Finalized:
		st.Reason = "the grant was withdrawn before the reboot: giving the slot back"
		return v1alpha1.StepYielding
	case !node.Spec.Unschedulable:
		st.Reason = "the node was uncordoned mid-update: cordoning and draining again"
		return v1alpha1.StepCordoning
	}
	return ""
}

func (m *Machine) draining(ctx context.Context, node *corev1.Node, want Desired) (v1alpha1.Step, error) {
	if back := m.disruptionStillOurs(node, want); back != "" {
		return back, nil
	}
	return m.drain(ctx, want)
}

func (m *Machine) hooksPreReboot(ctx context.Context, node *corev1.Node, want Desired) (v1alpha1.Step, error) {
	if back := m.disruptionStillOurs(node, want); back != "" {
		return back, nil
	}
	if hooks := m.heldBy(ctx, node, drain.PreReboot); len(hooks) > 0 {
		m.state.Reason = "waiting: " + drain.PreReboot.Describe(hooks)
		return v1alpha1.StepHooksPreReboot, nil
	}
	m.state.Reason = ""
	// The boot ID goes on disk before finalizing: rpm-ostree may reboot by
	// itself as soon as the deployment is unlocked.
	return m.markBoot(v1alpha1.StepFinalizing)
}

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
	if err := m.uncordon(ctx); err != nil {
		return v1alpha1.StepUncordoning, err
	}
	if m.cfg.Metrics != nil && !m.state.UnavailableSince.IsZero() {
		m.cfg.Metrics.unavailable(m.cfg.Now().Sub(m.state.UnavailableSince))
	}
	return v1alpha1.StepDone, nil
}

// finished is Done and Degraded: both wait for a new target.
func (m *Machine) finished(ctx context.Context, node *corev1.Node, want Desired) (v1alpha1.Step, error) {
	if want.Target != "" && want.Target != m.state.Target {
		return m.restart(ctx, node, want)
	}
	return m.state.Step, nil
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
	return v1alpha1.StepDegraded, nil
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
		st.Grant = want.Grant
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

// cordonedByNodeward reports whether node carries nodeward's own cordon.
func cordonedByNodeward(node *corev1.Node) bool {
	_, ours := node.Annotations[v1alpha1.AnnotationCordonedBy]
	return ours && node.Spec.Unschedulable
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

func (m *Machine) drain(ctx context.Context, want Desired) (v1alpha1.Step, error) {
	st := &m.state
	if st.DrainSince.IsZero() {
		st.DrainSince = m.cfg.Now()
	}
	attempt, cancel := context.WithTimeout(ctx, m.cfg.DrainAttempt)
	err := m.cfg.Workloads.Drain(attempt)
	cancel()
	if err == nil {
		st.Reason = ""
		return v1alpha1.StepHooksPreReboot, nil
	}
	timeout := m.cfg.DrainTimeout
	if want.DrainTimeout > 0 {
		timeout = want.DrainTimeout
	}
	blockedFor := m.cfg.Now().Sub(st.DrainSince)
	st.Reason = "drain: " + err.Error()
	if want.ForceOnDrainTimeout && blockedFor > timeout {
		// The forced drain first lets evictions work for forceAfter;
		// its attempt must outlast that or it never gets to force.
		attempt, cancel := context.WithTimeout(ctx, forceAfter+m.cfg.DrainAttempt)
		ferr := m.cfg.Workloads.ForceDrain(attempt)
		cancel()
		if ferr == nil {
			st.Reason = ""
			// The drain package recorded a DrainForced Event per pod.
			m.cfg.Log.Warn("drain forced: blocking pods deleted without eviction (pool onTimeout Force)",
				"blockedFor", blockedFor.Round(time.Second), "blockedBy", err)
			return v1alpha1.StepHooksPreReboot, nil
		}
		err = ferr
	}
	if want.YieldOnDrainTimeout && blockedFor > timeout {
		st.Reason = fmt.Sprintf("drain blocked for %s: %v", blockedFor.Round(1e9), err)
		return v1alpha1.StepYielding, nil
	}
	if errors.Is(err, drain.ErrBlocked) || errors.Is(err, context.DeadlineExceeded) {
		return v1alpha1.StepDraining, nil // waiting, not failing
	}
	return v1alpha1.StepDraining, fmt.Errorf("drain: %w", err)
}

func (m *Machine) finalizing(ctx context.Context, node *corev1.Node, want Desired) (v1alpha1.Step, error) {
	if rebooted, err := m.rebooted(); err != nil || rebooted {
		return m.afterBoot(err) // finalization rebooted the machine
	}
	if back := m.disruptionStillOurs(node, want); back != "" {
		return back, nil
	}
	if len(drain.PreReboot.Hooks(node)) > 0 {
		return v1alpha1.StepHooksPreReboot, nil // a hook came back since it was checked
	}
	lost, err := m.stagingLost()
	if err != nil {
		return v1alpha1.StepFinalizing, err
	}
	if lost || m.cfg.StageAfterDrain {
		if err := m.stage(ctx); err != nil {
			return v1alpha1.StepFinalizing, err
		}
	}
	if err := m.cfg.OS.Finalize(ctx, m.state.Target); err != nil {
		return v1alpha1.StepFinalizing, fmt.Errorf("finalize %s: %w", m.state.Target, err)
	}
	m.state.Finalized = true
	return v1alpha1.StepRebooting, nil
}

// markBoot records the current boot ID and moves to next. From then on a
// different boot ID proves the machine rebooted, and the same one that it
// did not, whatever the agent did in between: the reboot is never asked
// for again once it happened.
func (m *Machine) markBoot(next v1alpha1.Step) (v1alpha1.Step, error) {
	id, err := m.cfg.BootID()
	if err != nil {
		return m.state.Step, fmt.Errorf("read boot ID: %w", err)
	}
	m.state.BootID = id
	return next, nil
}

// rebooted reports whether the machine booted since markBoot.
func (m *Machine) rebooted() (bool, error) {
	id, err := m.cfg.BootID()
	if err != nil {
		return false, fmt.Errorf("read boot ID: %w", err)
	}
	return id != m.state.BootID, nil
}

// afterBoot is the step after the reboot: verification, or after a
// rollback the report of it.
func (m *Machine) afterBoot(err error) (v1alpha1.Step, error) {
	if err != nil {
		return m.state.Step, err
	}
	m.state.BootID, m.state.Finalized = "", false
	if m.state.RollingBack {
		m.state.RollingBack = false
		return v1alpha1.StepRolledBack, nil
	}
	return v1alpha1.StepVerifying, nil
}

// rebooting asks for the reboot, once the node is still the cordoned,
// drained object. A Node re-created between the finalize and the reboot
// request (an agent crash in between) holds no grant and no cordon: the
// agent waits in Staged for a new grant, the deployment staying finalized,
// rather than disrupt a node the coordinator counts available. A node
// uncordoned in that window, still granted, is cordoned and drained again.
func (m *Machine) rebooting(ctx context.Context, node *corev1.Node, _ Desired) (v1alpha1.Step, error) {
	if rebooted, err := m.rebooted(); err != nil || rebooted {
		return m.afterBoot(err)
	}
	st := &m.state
	switch {
	case st.NodeUID != "" && string(node.UID) != st.NodeUID:
		st.Cordoned, st.NodeUID, st.Grant, st.DrainSince = false, "", "", time.Time{}
		st.Reason = "the Node object was re-created after the finalize: waiting for a new grant before draining and rebooting"
		return v1alpha1.StepStaged, nil
	case !node.Spec.Unschedulable:
		st.Cordoned = false
		st.Reason = "the node was uncordoned after the finalize: cordoning and draining again before the reboot"
		return v1alpha1.StepCordoning, nil
	}
	return m.reboot(ctx)
}

func (m *Machine) reboot(ctx context.Context) (v1alpha1.Step, error) {
	if rebooted, err := m.rebooted(); err != nil || rebooted {
		return m.afterBoot(err)
	}
	now := m.cfg.Now()
	if !m.rebootAsked.IsZero() && now.Sub(m.rebootAsked) < m.cfg.RebootRetry {
		return v1alpha1.StepRebooting, nil // asked already; waiting to go down
	}
	m.rebootAsked = now
	if err := m.cfg.Reboot.Reboot(ctx, "nodeward: boot "+orNone(m.state.Target)); err != nil {
		m.rebootAsked = time.Time{}
		return v1alpha1.StepRebooting, fmt.Errorf("reboot: %w", err)
	}
	return v1alpha1.StepRebooting, nil
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
