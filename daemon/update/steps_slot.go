package update

// The steps before any disruption: staging the target and taking a grant.

import (
	"context"
	"errors"
	"fmt"

	corev1 "k8s.io/api/core/v1"

	v1alpha1 "github.com/nodeward/nodeward/api/v1alpha1"
	"github.com/nodeward/nodeward/drain"
)

func (m *Machine) staging(ctx context.Context, node *corev1.Node, want Desired) (v1alpha1.Step, error) {
	st := &m.state
	if want.Target != st.Target {
		return m.restart(ctx, node, want)
	}
	if m.cfg.StageAfterDrain {
		return v1alpha1.StepStaged, nil // staged in Finalizing, after the drain
	}
	if err := m.stage(ctx); err != nil {
		if errors.Is(err, ErrRefused) {
			st.Refused, st.Reason = true, err.Error()
			return v1alpha1.StepDegraded, nil
		}
		return v1alpha1.StepStaging, err
	}
	if err := m.decideDisruption(ctx); err != nil {
		return v1alpha1.StepStaging, err
	}
	// Staged before the slot unless the grant arrived first.
	st.StagedBeforeSlot = want.Grant == ""
	return v1alpha1.StepStaged, nil
}

// decideDisruption asks a LiveUpdater, once per update, what applying the
// staged target needs; other OS updaters drain and reboot.
func (m *Machine) decideDisruption(ctx context.Context) error {
	live, ok := m.cfg.OS.(LiveUpdater)
	if !ok {
		return nil
	}
	d, err := live.Disruption(ctx, m.state.Target)
	if err != nil {
		return fmt.Errorf("decide what updating to %s disrupts: %w", m.state.Target, err)
	}
	m.state.Disruption = d
	if d.NoDrain || d.NoReboot {
		m.cfg.Log.Info("the update disrupts less than a drain and a reboot", "target", m.state.Target,
			"drain", !d.NoDrain, "reboot", !d.NoReboot, "reason", d.Reason)
	}
	return nil
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
	why := m.unusableGrant(want)
	if why == "" {
		var err error
		if why, err = m.staleTerm(ctx, want); err != nil {
			st.Reason = "holding grant " + want.Grant + " untaken: " + err.Error()
			return v1alpha1.StepStaged, err
		}
	}
	if why != "" {
		// Give the grant back at once rather than hold a slot it will
		// never use: the coordinator releases a Yielded grant.
		st.Grant, st.ReleaseAtDone, st.Reason = want.Grant, false, why
		return v1alpha1.StepYielded, nil
	}
	// The grant is the Node object's: one deleted and created again holds
	// none, and every step that can disrupt checks it is still this one.
	st.Grant, st.ReleaseAtDone, st.Reason, st.NodeUID = want.Grant, want.ReleaseAtDone, "", string(node.UID)
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

// staleTerm asks the protocol, when it can tell, whether want's grant was
// issued by a deposed coordinator leader (TermChecker).
func (m *Machine) staleTerm(ctx context.Context, want Desired) (string, error) {
	checker, ok := m.cfg.Protocol.(TermChecker)
	if !ok {
		return "", nil
	}
	return checker.StaleTerm(ctx, want)
}

// slotStillHeld checks, before any disruption, that the grant taken is
// still the coordinator's, on the same Node object, and the staged
// deployment still there; if not, the machine goes back to Staged (or
// Staging) without having disrupted anything.
func (m *Machine) slotStillHeld(node *corev1.Node, want Desired) (v1alpha1.Step, bool, error) {
	if m.nodeReplaced(node) || !m.grantHeld(want) {
		m.state.Grant, m.state.NodeUID = "", ""
		return v1alpha1.StepStaged, false, nil // grant withdrawn before any disruption
	}
	if lost, err := m.stagingLost(); err != nil || lost {
		return v1alpha1.StepStaging, false, err
	}
	return "", true, nil
}

// grantHeld reports whether want still carries the grant this update took,
// issued for its target: a grant removed, replaced by another or issued
// for another target is not this update's slot.
func (m *Machine) grantHeld(want Desired) bool {
	return want.Grant != "" && want.Grant == m.state.Grant && want.GrantTarget == m.state.Target
}

// nodeReplaced reports whether node is another object than the one this
// update took its grant on (deleted and created again: no grant, no cordon,
// no drain). A state without the UID (written by an older agent) records
// the current one.
func (m *Machine) nodeReplaced(node *corev1.Node) bool {
	if m.state.NodeUID == "" {
		m.state.NodeUID = string(node.UID)
		return false
	}
	return string(node.UID) != m.state.NodeUID
}

func (m *Machine) granted(_ context.Context, node *corev1.Node, want Desired) (v1alpha1.Step, error) {
	if next, ok, err := m.slotStillHeld(node, want); !ok {
		return next, err
	}
	return v1alpha1.StepHooksPreDrain, nil
}

func (m *Machine) hooksPreDrain(ctx context.Context, node *corev1.Node, want Desired) (v1alpha1.Step, error) {
	if next, ok, err := m.slotStillHeld(node, want); !ok {
		return next, err
	}
	if hooks := m.heldBy(ctx, node, drain.PreDrain); len(hooks) > 0 {
		m.state.Reason = "waiting: " + drain.PreDrain.Describe(hooks)
		return v1alpha1.StepHooksPreDrain, nil
	}
	m.state.Reason = ""
	return v1alpha1.StepCordoning, nil
}
