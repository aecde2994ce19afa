package update

import (
	"context"
	"errors"
	"slices"
	"testing"

	v1alpha1 "github.com/nodeward/nodeward/api/v1alpha1"
)

// liveWorld is world with an OS updater that applies some targets in place
// (LiveUpdater) and a drainer told of updates that cordoned nothing
// (Releaser).
type liveWorld struct {
	*world
	disruption    Disruption
	disruptionErr error
	applyErr      error
	applies       int
	releases      int
}

func (w *liveWorld) Disruption(context.Context, string) (Disruption, error) {
	w.mu.Lock()
	defer w.mu.Unlock()
	return w.disruption, w.disruptionErr
}

func (w *liveWorld) ApplyLive(_ context.Context, target string) error {
	w.mu.Lock()
	defer w.mu.Unlock()
	if w.applyErr != nil {
		return w.applyErr
	}
	if w.staged != target {
		w.t.Errorf("applied %s in place, but the staged target is %q", target, w.staged)
	}
	w.applies++
	w.booted, w.staged = target, ""
	return nil
}

func (w *liveWorld) Release(context.Context) error {
	w.mu.Lock()
	defer w.mu.Unlock()
	if w.node.Spec.Unschedulable {
		w.t.Errorf("release asked for a node that is cordoned")
	}
	w.releases++
	return nil
}

func newLiveWorld(t *testing.T, d Disruption) *liveWorld {
	return &liveWorld{world: newWorld(t, "os-1"), disruption: d}
}

func (w *liveWorld) machine(dir string) *Machine {
	w.t.Helper()
	return w.machineWith(dir, w, w)
}

func TestLiveUpdateNeitherCordonsNorReboots(t *testing.T) {
	t.Parallel()
	w := newLiveWorld(t, Disruption{NoDrain: true, NoReboot: true, Reason: "an SSH key"})
	w.desired = Desired{Target: "os-2", Grant: "g1"}
	m := w.machine(t.TempDir())
	if got := settle(t, m); got != v1alpha1.StepDone {
		t.Fatalf("live update: step %s, want Done (reason %q)", got, m.State().Reason)
	}
	if w.totalReboots != 0 || w.wasEverDrained || w.cordonedByUs || w.applies != 1 || w.booted != "os-2" {
		t.Fatalf("live update: reboots %d drained %v cordoned %v applies %d booted %q; want 0, false, false, 1, os-2",
			w.totalReboots, w.wasEverDrained, w.cordonedByUs, w.applies, w.booted)
	}
	if w.releases != 1 || w.uncordonedByUs != 0 {
		t.Fatalf("the drainer must hear the update ended once, with no uncordon: releases %d uncordons %d", w.releases, w.uncordonedByUs)
	}
	want := []v1alpha1.Step{v1alpha1.StepIdle, v1alpha1.StepStaging, v1alpha1.StepStaged, v1alpha1.StepGranted, v1alpha1.StepHooksPreDrain,
		v1alpha1.StepCordoning, v1alpha1.StepHooksPreReboot, v1alpha1.StepFinalizing, v1alpha1.StepVerifying, v1alpha1.StepWaitingHealthy,
		v1alpha1.StepUncordoning, v1alpha1.StepDone}
	if !slices.Equal(w.reported, want) {
		t.Fatalf("reported steps\n got %v\nwant %v", w.reported, want)
	}
}

func TestLiveUpdateThatDrainsDoesNotReboot(t *testing.T) {
	t.Parallel()
	w := newLiveWorld(t, Disruption{NoReboot: true, Reason: "a mirror that is not digest-only"})
	w.desired = Desired{Target: "os-2", Grant: "g1"}
	m := w.machine(t.TempDir())
	if got := settle(t, m); got != v1alpha1.StepDone {
		t.Fatalf("step %s, want Done (reason %q)", got, m.State().Reason)
	}
	if w.totalReboots != 0 || !w.wasEverDrained || w.node.Spec.Unschedulable || w.uncordonedByUs != 1 || w.releases != 0 {
		t.Fatalf("reboots %d drained %v unschedulable %v uncordons %d releases %d; want 0, true, false, 1, 0",
			w.totalReboots, w.wasEverDrained, w.node.Spec.Unschedulable, w.uncordonedByUs, w.releases)
	}
}

// TestLiveApplyFailureNeverReboots: an application that fails is retried
// and reported, never replaced by a reboot; once it works the update ends.
func TestLiveApplyFailureNeverReboots(t *testing.T) {
	t.Parallel()
	w := newLiveWorld(t, Disruption{NoDrain: true, NoReboot: true})
	w.applyErr = errors.New("reloading crio.service configuration failed")
	w.desired = Desired{Target: "os-2", Grant: "g1"}
	m := w.machine(t.TempDir())
	for range 20 {
		if _, err := m.Advance(context.Background()); err != nil {
			break
		}
	}
	if _, err := m.Advance(context.Background()); err == nil || !errors.Is(err, w.applyErr) {
		t.Fatalf("a failing application must fail its step, got %v", err)
	}
	if st := m.State(); st.Step != v1alpha1.StepFinalizing || w.totalReboots != 0 {
		t.Fatalf("after failed applications: step %s reboots %d; want Finalizing, 0", st.Step, w.totalReboots)
	}
	w.set(func(*world) { w.applyErr = nil })
	if got := settle(t, m); got != v1alpha1.StepDone || w.totalReboots != 0 || w.applies != 1 {
		t.Fatalf("once the application works: step %s reboots %d applies %d", got, w.totalReboots, w.applies)
	}
}

// TestLiveUpdateKeepsItsDecision: the disruption is decided once, at
// staging; an agent restarted later (when the OS updater would answer
// otherwise, the force file consumed, say) and a boot nobody asked for in
// the middle of the application change nothing of it.
func TestLiveUpdateKeepsItsDecision(t *testing.T) {
	t.Parallel()
	w := newLiveWorld(t, Disruption{NoDrain: true, NoReboot: true})
	w.desired = Desired{Target: "os-2"}
	dir := t.TempDir()
	if got := settle(t, w.machine(dir)); got != v1alpha1.StepStaged {
		t.Fatalf("step %s, want Staged", got)
	}
	w.set(func(*world) { w.disruption = Disruption{}; w.desired.Grant = "g1" })
	m := w.machine(dir)
	runUntil(t, m, v1alpha1.StepFinalizing)
	w.bootUnplanned()
	w.set(func(*world) { w.staged = "os-2" }) // nothing of an in-place update lives in the staged deployment
	m = w.machine(dir)
	if got := settle(t, m); got != v1alpha1.StepDone {
		t.Fatalf("step %s, want Done (reason %q)", got, m.State().Reason)
	}
	if w.totalReboots != 0 || w.wasEverDrained || w.rolledBack {
		t.Fatalf("reboots %d drained %v rolled back %v: the decision made at staging must hold", w.totalReboots, w.wasEverDrained, w.rolledBack)
	}
}

func TestDisruptionUndecidedStaysStaging(t *testing.T) {
	t.Parallel()
	w := newLiveWorld(t, Disruption{})
	w.disruptionErr = errors.New("NodeDisruptionPolicyStatus is not up to date")
	w.desired = Desired{Target: "os-2", Grant: "g1"}
	m := w.machine(t.TempDir())
	var err error
	for range 5 {
		if _, err = m.Advance(context.Background()); err != nil {
			break
		}
	}
	if !errors.Is(err, w.disruptionErr) || m.State().Step != v1alpha1.StepStaging || w.cordonedByUs {
		t.Fatalf("undecided disruption: err %v step %s cordoned %v; want the error, Staging, no cordon", err, m.State().Step, w.cordonedByUs)
	}
	w.set(func(*world) { w.disruptionErr = nil })
	if got := settle(t, m); got != v1alpha1.StepRebooting || !w.wasEverDrained {
		t.Fatalf("decided (drain and reboot): step %s drained %v; want Rebooting after a drain", got, w.wasEverDrained)
	}
}
