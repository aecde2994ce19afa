package update

// The steps that disrupt the node: cordon, drain, finalize, reboot.

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"time"

	corev1 "k8s.io/api/core/v1"

	v1alpha1 "github.com/nodeward/nodeward/api/v1alpha1"
	"github.com/nodeward/nodeward/drain"
)

func (m *Machine) cordoning(ctx context.Context, node *corev1.Node, want Desired) (v1alpha1.Step, error) {
	// The cordon is the first disruption: it needs the grant as much as
	// the drain and the reboot do. A Node re-created while the agent sat
	// here holds no grant, and cordoning it disrupted a node the
	// coordinator counted available (the protocol simulator found two
	// control-plane nodes down at once).
	if back := m.grantStillOurs(node, want); back != "" {
		return back, nil
	}
	if len(drain.PreDrain.Hooks(node)) > 0 {
		return v1alpha1.StepHooksPreDrain, nil // a hook came back since it was checked
	}
	if !m.drains(want) {
		m.state.Reason = m.noDrainReason(want)
		return v1alpha1.StepHooksPreReboot, nil
	}
	byUs, err := m.cfg.Workloads.Cordon(ctx)
	if errors.Is(err, drain.ErrBlocked) {
		m.state.Reason = "cordon: " + err.Error()
		return v1alpha1.StepCordoning, nil // waiting for the drainer, not failing
	}
	if err != nil {
		return v1alpha1.StepCordoning, fmt.Errorf("cordon: %w", err)
	}
	if !byUs {
		m.state.Reason = "node was cordoned by someone else; nodeward leaves it alone"
		return v1alpha1.StepYielding, nil
	}
	m.state.Cordoned = true
	return v1alpha1.StepDraining, nil
}

// drains tells whether this update cordons and drains the node: not on a
// single-node cluster (SkipDrain), not when the update asks for no drain.
func (m *Machine) drains(want Desired) bool {
	return !want.SkipDrain && !m.state.Disruption.NoDrain
}

func (m *Machine) noDrainReason(want Desired) string {
	if want.SkipDrain {
		return "no cordon and no drain: a single-node cluster has nowhere to move its pods"
	}
	return "no cordon and no drain: " + m.state.Disruption.Reason
}

// grantStillOurs checks, at every step that can disrupt, that the Node is
// the object the grant was taken on and that the grant (its name and
// target) is still the one taken. Once finalized the node is drained
// whatever happens to its grant: the next boot starts the target. It
// returns the step to go back to, or "" when both hold.
func (m *Machine) grantStillOurs(node *corev1.Node, want Desired) v1alpha1.Step {
	st := &m.state
	switch {
	case m.nodeReplaced(node):
		// A new object: not cordoned, not drained, no grant. Nothing of
		// this update's disruption holds; start over from Staged.
		st.Cordoned, st.Grant, st.NodeUID, st.DrainSince = false, "", "", time.Time{}
		st.Reason = "the Node object was deleted and created again mid-update: its grant and drain are void"
		return v1alpha1.StepStaged
	case !m.grantHeld(want) && !st.Finalized:
		st.Reason = "the grant was withdrawn before the reboot: giving the slot back"
		return v1alpha1.StepYielding
	}
	return ""
}

// disruptionStillOurs checks, between the cordon and the reboot, that the
// grant is still ours (grantStillOurs) and the node still cordoned;
// otherwise the reboot must not happen on this drain. It returns the step
// to go back to, or "" when all holds.
func (m *Machine) disruptionStillOurs(node *corev1.Node, want Desired) v1alpha1.Step {
	if back := m.grantStillOurs(node, want); back != "" {
		return back
	}
	if !node.Spec.Unschedulable && m.drains(want) {
		m.state.Reason = "the node was uncordoned mid-update: cordoning and draining again"
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
	st.Reason = "drain: " + err.Error()
	blockedFor := m.cfg.Now().Sub(st.DrainSince)
	if !(want.ForceOnDrainTimeout || want.YieldOnDrainTimeout) || blockedFor <= m.drainTimeout(want) {
		// Nothing to decide yet; a policy changed since is read next turn.
		return m.drainWaits(err)
	}
	// The policy is the pool's now, not when this attempt started: a pool
	// switched from onTimeout Force to Retry during the attempt must not
	// have its pods force-deleted.
	want, ok := m.currentDrainPolicy(ctx, want)
	if !ok {
		return v1alpha1.StepDraining, nil // the grant changed: the next turn acts on it
	}
	timeout := m.drainTimeout(want)
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
	return m.drainWaits(err)
}

// drainWaits is Draining after a failed attempt: waiting on a blocked
// drain, failing on anything else.
func (m *Machine) drainWaits(err error) (v1alpha1.Step, error) {
	if errors.Is(err, drain.ErrBlocked) || errors.Is(err, context.DeadlineExceeded) {
		return v1alpha1.StepDraining, nil // waiting, not failing
	}
	return v1alpha1.StepDraining, fmt.Errorf("drain: %w", err)
}

// drainTimeout is the pool's drain timeout, or the agent's.
func (m *Machine) drainTimeout(want Desired) time.Duration {
	if want.DrainTimeout > 0 {
		return want.DrainTimeout
	}
	return m.cfg.DrainTimeout
}

// currentDrainPolicy reads the pool's drain policy from the current Node
// (a fresh read when the NodeSource offers one), for the decision on a
// drain timeout: the Desired the step started with is as old as the drain
// attempt. ok is false when the Node no longer carries this update's
// grant. When the policy cannot be read the safe one holds: no force, no
// yield, the agent's own timeout.
func (m *Machine) currentDrainPolicy(ctx context.Context, started Desired) (Desired, bool) {
	safe := Desired{Target: started.Target, Grant: started.Grant, GrantTarget: started.GrantTarget}
	node, err := m.freshNode(ctx)
	if err != nil {
		m.cfg.Log.Warn("cannot read the drain policy after a blocked drain; neither forcing nor yielding", "err", err)
		return safe, true
	}
	now, err := m.cfg.Protocol.Desired(ctx, node)
	if err != nil {
		m.cfg.Log.Warn("cannot read the drain policy after a blocked drain; neither forcing nor yielding", "err", err)
		return safe, true
	}
	return now, !m.nodeReplaced(node) && (m.grantHeld(now) || m.state.Finalized)
}

// FreshNodeSource is a NodeSource that can also read the Node from the API
// server itself, for decisions that must not act on a watch's lag.
type FreshNodeSource interface {
	FreshNode(ctx context.Context) (*corev1.Node, error)
}

// freshNode is the Node read from the API server when the NodeSource can,
// else its latest copy.
func (m *Machine) freshNode(ctx context.Context) (*corev1.Node, error) {
	if fresh, ok := m.cfg.Node.(FreshNodeSource); ok {
		return fresh.FreshNode(ctx)
	}
	return m.cfg.Node.Node(ctx)
}

func (m *Machine) finalizing(ctx context.Context, node *corev1.Node, want Desired) (v1alpha1.Step, error) {
	if m.state.Disruption.NoReboot {
		return m.applyLive(ctx, node, want)
	}
	if rebooted, err := m.rebooted(); err != nil || rebooted {
		return m.afterBoot(err) // finalization rebooted the machine
	}
	if back, err := m.readyToApply(ctx, node, want); back != "" || err != nil {
		return back, err
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

// readyToApply checks, right before the target is finalized or applied in
// place, that the grant and cordon are still this update's, that no
// pre-reboot hook came back since it was checked, and that no pod came to
// the node since its drain. It returns the step to go back to (or the
// current one with an error), "" when the update may go on.
func (m *Machine) readyToApply(ctx context.Context, node *corev1.Node, want Desired) (v1alpha1.Step, error) {
	if back := m.disruptionStillOurs(node, want); back != "" {
		return back, nil
	}
	if len(drain.PreReboot.Hooks(node)) > 0 {
		return v1alpha1.StepHooksPreReboot, nil // a hook came back since it was checked
	}
	return m.stillDrained(ctx, want)
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
func (m *Machine) rebooting(ctx context.Context, node *corev1.Node, want Desired) (v1alpha1.Step, error) {
	if rebooted, err := m.rebooted(); err != nil || rebooted {
		return m.afterBoot(err)
	}
	st := &m.state
	switch {
	case m.nodeReplaced(node):
		st.Cordoned, st.NodeUID, st.Grant, st.DrainSince = false, "", "", time.Time{}
		st.Reason = "the Node object was re-created after the finalize: waiting for a new grant before draining and rebooting"
		return v1alpha1.StepStaged, nil
	case !node.Spec.Unschedulable && m.drains(want):
		st.Cordoned = false
		st.Reason = "the node was uncordoned after the finalize: cordoning and draining again before the reboot"
		return v1alpha1.StepCordoning, nil
	}
	if m.rebootAsked.IsZero() {
		if back, err := m.stillDrained(ctx, want); back != "" || err != nil {
			return back, err
		}
	}
	return m.reboot(ctx)
}

// stillDrained checks, from a fresh read, right before the finalize and
// the reboot, that no pod came to the node since its drain: a scheduler
// acting on a stale cache (after an API server restart) binds pods to a
// cordoned node, and the reboot would take them down without eviction. It
// returns Draining when some did, the current step on an error, or "".
// A node updated without a drain keeps its pods.
func (m *Machine) stillDrained(ctx context.Context, want Desired) (v1alpha1.Step, error) {
	if !m.drains(want) {
		return "", nil
	}
	pods, err := m.cfg.Workloads.Undrained(ctx)
	if err != nil {
		return m.state.Step, fmt.Errorf("check that the node is still drained: %w", err)
	}
	if len(pods) == 0 {
		return "", nil
	}
	names := make([]string, len(pods))
	for i, p := range pods {
		names[i] = p.String()
	}
	m.state.DrainSince = time.Time{} // the new pods get the whole drain timeout
	m.state.Reason = fmt.Sprintf("%d pods were bound to the node after its drain (%s): draining again",
		len(pods), strings.Join(names, ", "))
	m.cfg.Log.Warn("pods on the node after its drain; draining again before the reboot", "pods", names)
	return v1alpha1.StepDraining, nil
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
