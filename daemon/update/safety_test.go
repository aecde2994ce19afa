package update

import (
	"context"
	"errors"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/nodeward/nodeward/api/v1alpha1"
	"github.com/nodeward/nodeward/drain"
)

// These tests pin the agent-side fixes of the safety review: each names the
// interleaving that broke the machine before.

// A finalization-locked staged deployment does not survive a reboot; a node
// that rebooted while it waited for its slot stages again instead of
// draining and then looping in Finalizing.
func TestUnplannedRebootWhileStagedStagesAgain(t *testing.T) {
	t.Parallel()
	w := newWorld(t, "os-1")
	w.desired = Desired{Target: "os-2"}
	dir := t.TempDir()
	m := w.machine(dir)
	if got := settle(t, m); got != v1alpha1.StepStaged || w.staged != "os-2" {
		t.Fatalf("before the power cut: step %s staged %q", got, w.staged)
	}
	w.bootUnplanned()
	m = w.machine(dir)
	if got := settle(t, m); got != v1alpha1.StepStaged || w.staged != "os-2" {
		t.Fatalf("after an unplanned reboot: step %s staged %q; want Staged with the target staged again", got, w.staged)
	}
	w.set(func(w *world) { w.desired.Grant = "g1" })
	if got := settle(t, m); got != v1alpha1.StepRebooting || w.finalized != "os-2" {
		t.Fatalf("after the grant: step %s finalized %q", got, w.finalized)
	}
}

// The same power cut in the middle of the drain: Finalizing stages again
// inside the slot rather than failing forever.
func TestUnplannedRebootMidDrainStagesAgainBeforeFinalizing(t *testing.T) {
	t.Parallel()
	w := newWorld(t, "os-1")
	w.desired = Desired{Target: "os-2", Grant: "g1"}
	w.drainErr = drain.ErrBlocked
	dir := t.TempDir()
	m := w.machine(dir)
	if got := settle(t, m); got != v1alpha1.StepDraining {
		t.Fatalf("blocked drain: step %s", got)
	}
	w.bootUnplanned()
	w.set(func(w *world) { w.drainErr = nil })
	m = w.machine(dir)
	if got := settle(t, m); got != v1alpha1.StepRebooting || w.finalized != "os-2" || w.rebootUndrained {
		t.Fatalf("after the power cut: step %s finalized %q undrained reboot %v", got, w.finalized, w.rebootUndrained)
	}
}

// A grant issued for another target is never used, nor is the grant of
// the previous update, whatever the coordinator left on the node.
func TestGrantsAreUsedOnlyForTheirTargetAndOnce(t *testing.T) {
	t.Parallel()
	w := newWorld(t, "os-1")
	w.desired = Desired{Target: "os-2", Grant: "g-old", GrantTarget: "os-1"}
	dir := t.TempDir()
	m := w.machine(dir)
	if got := settle(t, m); got != v1alpha1.StepYielded || !strings.Contains(m.State().Reason, "issued for target") ||
		m.State().Grant != "g-old" || w.node.Spec.Unschedulable {
		t.Fatalf("grant for another target: %+v; want it yielded at once, untouched, saying why", m.State())
	}
	w.set(func(w *world) { w.desired = Desired{Target: "os-2"} }) // the coordinator releases it
	if got := settle(t, m); got != v1alpha1.StepStaged {
		t.Fatalf("after the release: step %s, want Staged", got)
	}
	w.set(func(w *world) { w.desired = Desired{Target: "os-2", Grant: "g1"} })
	settle(t, m)
	w.boot(false)
	m = w.machine(dir)
	if got := settle(t, m); got != v1alpha1.StepDone {
		t.Fatalf("first update: step %s", got)
	}
	// The coordinator moves the target on but g1 lingers, even re-labelled
	// for the new target: the node stages and waits for a new grant.
	w.set(func(w *world) { w.desired = Desired{Target: "os-3", Grant: "g1", GrantTarget: "os-3"} })
	if got := settle(t, m); got != v1alpha1.StepYielded || w.totalReboots != 1 {
		t.Fatalf("stale grant: step %s reboots %d; want it yielded and no second reboot", got, w.totalReboots)
	}
	w.set(func(w *world) { w.desired.Grant = "g2" })
	if got := settle(t, m); got != v1alpha1.StepRebooting {
		t.Fatalf("a new grant: step %s, want Rebooting", got)
	}
}

// The state directory is lost across the reboot: the agent finds the node
// on the target, keeps the grant so that Done releases it, and lifts its
// own cordon after the health check.
func TestStateLossAfterTheRebootReleasesTheSlotAndTheCordon(t *testing.T) {
	t.Parallel()
	w := newWorld(t, "os-1")
	w.desired = Desired{Target: "os-2", Grant: "g1"}
	dir := t.TempDir()
	m := w.machine(dir)
	if got := settle(t, m); got != v1alpha1.StepRebooting {
		t.Fatalf("step %s, want Rebooting", got)
	}
	w.boot(false)
	if err := os.RemoveAll(dir); err != nil {
		t.Fatal(err)
	}
	m = w.machine(t.TempDir())
	if got := settle(t, m); got != v1alpha1.StepDone {
		t.Fatalf("after the state loss: step %s, want Done", got)
	}
	if st := m.State(); st.Grant != "g1" || w.node.Spec.Unschedulable || w.uncordonedByUs != 1 {
		t.Fatalf("Done with grant %q unschedulable %v uncordons %d; want g1 reported, nodeward's cordon lifted",
			st.Grant, w.node.Spec.Unschedulable, w.uncordonedByUs)
	}
}

// A Node deleted and created again mid-drain is a new object: not
// cordoned, not drained. The machine never reboots on the old drain.
func TestNodeRecreatedMidDrainIsNotRebooted(t *testing.T) {
	t.Parallel()
	w := newWorld(t, "os-1")
	w.desired = Desired{Target: "os-2", Grant: "g1"}
	w.drainErr = drain.ErrBlocked
	m := w.machine(t.TempDir())
	if got := settle(t, m); got != v1alpha1.StepDraining {
		t.Fatalf("step %s, want Draining", got)
	}
	w.set(func(w *world) {
		w.node = &corev1.Node{ObjectMeta: metav1.ObjectMeta{Name: "n1", UID: "uid-2", Annotations: map[string]string{}},
			Status: w.node.Status}
		w.cordonedByUs, w.drainErr = false, nil
		w.desired = Desired{Target: "os-2"} // the new object carries no grant
	})
	if got := settle(t, m); got != v1alpha1.StepStaged || w.totalReboots != 0 || w.finalized != "" {
		t.Fatalf("re-created node: step %s reboots %d finalized %q; want Staged, nothing finalized", got, w.totalReboots, w.finalized)
	}
}

// A grant withdrawn between the cordon and the reboot gives the slot back;
// a node uncordoned by someone mid-update is cordoned and drained again.
func TestDisruptionIsCheckedBeforeTheReboot(t *testing.T) {
	t.Parallel()
	w := newWorld(t, "os-1")
	w.desired = Desired{Target: "os-2", Grant: "g1"}
	w.node.Annotations[v1alpha1.PreRebootHookPrefix+"flush"] = "logs"
	m := w.machine(t.TempDir())
	if got := settle(t, m); got != v1alpha1.StepHooksPreReboot {
		t.Fatalf("step %s, want HooksPreReboot", got)
	}
	w.set(func(w *world) { w.node.Spec.Unschedulable, w.drained = false, false })
	if got := settle(t, m); got != v1alpha1.StepHooksPreReboot || !w.node.Spec.Unschedulable || !w.drained {
		t.Fatalf("uncordoned mid-update: step %s unschedulable %v drained %v; want cordoned and drained again",
			got, w.node.Spec.Unschedulable, w.drained)
	}
	w.set(func(w *world) { w.desired.Grant = "" })
	if got := settle(t, m); got != v1alpha1.StepStaged || w.node.Spec.Unschedulable || w.totalReboots != 0 {
		t.Fatalf("grant withdrawn: step %s unschedulable %v reboots %d; want Staged via Yielded, uncordoned, no reboot",
			got, w.node.Spec.Unschedulable, w.totalReboots)
	}
}

// A boot that comes up on the previous OS (the new deployment never took)
// is retried after staging again, not blamed on the target; after
// maxFailedBoots retries the node is Degraded without a rollback.
func TestBootIntoThePreviousOSIsRetried(t *testing.T) {
	t.Parallel()
	w, dir := rebooting(t)
	w.bootUnplanned() // the reboot happened, the finalized deployment did not take
	m := w.machine(dir)
	if got := settle(t, m); got != v1alpha1.StepRebooting || w.finalized != "os-2" || w.rolledBack {
		t.Fatalf("after a boot into the previous OS: step %s finalized %q rolledBack %v; want a second finalize",
			got, w.finalized, w.rolledBack)
	}
	w.boot(false)
	m = w.machine(dir)
	if got := settle(t, m); got != v1alpha1.StepDone || w.totalReboots != 2 {
		t.Fatalf("second attempt: step %s reboots %d; want Done after 2 reboots", got, w.totalReboots)
	}

	w2 := newWorld(t, "os-1")
	w2.desired = Desired{Target: "os-2", Grant: "g1"}
	dir2 := t.TempDir()
	m2 := w2.machine(dir2)
	settle(t, m2)
	for range maxFailedBoots + 1 {
		w2.bootUnplanned()
		m2 = w2.machine(dir2)
		settle(t, m2)
	}
	if st := m2.State(); st.Step != v1alpha1.StepDegraded || w2.rolledBack || !strings.Contains(st.Reason, "previous OS") {
		t.Fatalf("after %d failed boots: %+v rolledBack %v; want Degraded, no rollback", maxFailedBoots+1, st, w2.rolledBack)
	}
}

// A malformed coordinator annotation never freezes an update in flight: it
// finishes and uncordons; nothing new starts while the annotation is bad.
func TestMalformedCoordinatorAnnotationHoldsPosition(t *testing.T) {
	t.Parallel()
	w, dir := rebooting(t)
	w.boot(false)
	w.set(func(w *world) {
		w.desiredErr = errors.New(`annotation update.nodeward.io/drain-timeout="abc": want a positive duration`)
	})
	m := w.machine(dir)
	if got := settle(t, m); got != v1alpha1.StepDone || w.node.Spec.Unschedulable {
		t.Fatalf("bad annotation after the reboot: step %s unschedulable %v; want Done, uncordoned", got, w.node.Spec.Unschedulable)
	}
	w.set(func(w *world) { w.desired = Desired{Target: "os-3", Grant: "g2"} })
	if got := settle(t, m); got != v1alpha1.StepDone {
		t.Fatalf("new target behind a bad annotation: step %s, want Done (nothing new starts)", got)
	}
}

// A rollback whose reboot comes up on anything but the previous OS is
// reported as a failed rollback, never as "rolled back".
func TestFailedRollbackIsNotReportedAsDone(t *testing.T) {
	t.Parallel()
	w, dir := rebooting(t)
	w.boot(true)
	m := w.machine(dir)
	if got := settle(t, m); got != v1alpha1.StepRebooting || !w.rolledBack {
		t.Fatalf("step %s rolledBack %v, want Rebooting into the rollback", got, w.rolledBack)
	}
	w.set(func(w *world) { w.previous = "os-2-broken" }) // the rollback did not take
	w.boot(false)
	m = w.machine(filepath.Clean(dir))
	if st := m.State(); settle(t, m) != v1alpha1.StepDegraded || !strings.HasPrefix(m.State().Reason, "rollback failed") {
		t.Fatalf("after a rollback that did not take: %+v; want Degraded with \"rollback failed\"", st)
	}
}

// The agent is told to stop (SIGTERM) in the middle of finalizing: the
// finalize is not cut, its result is persisted, and only then does Run
// return; the next start resumes without a second finalize.
func TestShutdownDuringFinalizeLetsItFinish(t *testing.T) {
	t.Parallel()
	w := newWorld(t, "os-1")
	w.desired = Desired{Target: "os-2", Grant: "g1"}
	w.finalizeGate = make(chan struct{})
	dir := t.TempDir()
	m := w.machine(dir)
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- m.Run(ctx) }()
	select {
	case <-w.finalizeGate: // the finalize is running
	case <-time.After(10 * time.Second):
		t.Fatal("the machine never reached the finalize")
	}
	cancel()
	select {
	case err := <-done:
		t.Fatalf("Run returned (%v) while the finalize was still running", err)
	case <-time.After(100 * time.Millisecond):
	}
	w.finalizeGate <- struct{}{}
	select {
	case err := <-done:
		if err != nil {
			t.Fatalf("Run: %v", err)
		}
	case <-time.After(10 * time.Second):
		t.Fatal("Run did not return after the finalize ended")
	}
	if w.finalized != "os-2" {
		t.Fatalf("finalized %q: the shutdown cut the finalize", w.finalized)
	}
	st, err := (Store{Path: filepath.Join(dir, "update-state.json")}).Load()
	if err != nil || st.Step != v1alpha1.StepRebooting {
		t.Fatalf("persisted %+v, %v; want Rebooting", st, err)
	}
	w.finalizeGate = nil
	m = w.machine(dir)
	if got := settle(t, m); got != v1alpha1.StepRebooting || w.totalReboots != 1 {
		t.Fatalf("after the restart: step %s reboots %d", got, w.totalReboots)
	}
}

// A pod bound to the cordoned node after its drain (a scheduler acting on
// a stale cache after an API server restart; chaos finding 1) sends the
// machine back to Draining, whether it arrives before the finalize or
// between the finalize and the reboot request; the node never reboots with
// it.
func TestPodBoundAfterTheDrainIsDrainedBeforeTheReboot(t *testing.T) {
	for _, at := range []v1alpha1.Step{v1alpha1.StepFinalizing, v1alpha1.StepRebooting} {
		t.Run(string(at), func(t *testing.T) {
			t.Parallel()
			w := newWorld(t, "os-1")
			w.desired = Desired{Target: "os-2", Grant: "g1"}
			m := w.machine(t.TempDir())
			runUntil(t, m, at)
			w.set(func(w *world) { w.lateBound = []drain.PodRef{{Namespace: "apps", Name: "web-1"}} })
			if _, err := m.Advance(context.Background()); err != nil {
				t.Fatal(err)
			}
			if st := m.State(); st.Step != v1alpha1.StepDraining || !strings.Contains(st.Reason, "apps/web-1") {
				t.Fatalf("after a pod was bound in %s: step %s reason %q; want Draining naming the pod", at, st.Step, st.Reason)
			}
			if got := settle(t, m); got != v1alpha1.StepRebooting || w.rebootUndrained || w.finalized != "os-2" {
				t.Fatalf("step %s, finalized %q, rebooted with the late pod %v; want Rebooting after a second drain",
					got, w.finalized, w.rebootUndrained)
			}
		})
	}
}
