package update

// An update applied in place (LiveUpdater): no finalize, no reboot.

import (
	"context"
	"fmt"

	corev1 "k8s.io/api/core/v1"

	v1alpha1 "github.com/nodeward/nodeward/api/v1alpha1"
)

// applyLive is Finalizing for an update whose Disruption asks for no
// reboot: the OS updater applies the staged target in place, then the
// update is verified as after a boot. It runs again after a crash (the
// application is idempotent) and never reboots: an application that fails
// is retried and reported, and a boot in the middle of it changes nothing
// of what it does.
func (m *Machine) applyLive(ctx context.Context, node *corev1.Node, want Desired) (v1alpha1.Step, error) {
	if back, err := m.readyToApply(ctx, node, want); back != "" || err != nil {
		return back, err
	}
	live, ok := m.cfg.OS.(LiveUpdater)
	if !ok {
		// A state written by an agent wired with another OS updater: the
		// update cannot be applied in place here, and rebooting instead
		// would do what its Disruption ruled out.
		m.state.Reason = fmt.Sprintf("the update to %s is to be applied without a reboot, and this agent's OS updater cannot", m.state.Target)
		return v1alpha1.StepDegraded, nil
	}
	if err := live.ApplyLive(ctx, m.state.Target); err != nil {
		return v1alpha1.StepFinalizing, fmt.Errorf("apply %s without a reboot: %w", m.state.Target, err)
	}
	m.state.Reason = ""
	return v1alpha1.StepVerifying, nil
}

// release ends an update that cordoned nothing: a drainer that must hear
// of it (Releaser) is told; nothing else is done.
func (m *Machine) release(ctx context.Context) error {
	r, ok := m.cfg.Workloads.(Releaser)
	if !ok {
		return nil
	}
	if err := r.Release(ctx); err != nil {
		return fmt.Errorf("end the update with the drainer: %w", err)
	}
	return nil
}
