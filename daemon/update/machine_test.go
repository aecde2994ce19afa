package update

import (
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"

	v1alpha1 "github.com/nodeward/nodeward/api/v1alpha1"
	"github.com/nodeward/nodeward/drain"
)

// TestFullCycle follows one update from a new target to Done and checks the
// order of the steps, the single reboot and the uncordon.
func TestFullCycle(t *testing.T) {
	t.Parallel()
	w := newWorld(t, "os-1")
	dir := t.TempDir()
	m := w.machine(dir)
	if got := settle(t, m); got != v1alpha1.StepIdle {
		t.Fatalf("without a target: step %s, want Idle", got)
	}
	w.set(func(w *world) { w.desired.Target = "os-2" })
	if got := settle(t, m); got != v1alpha1.StepStaged {
		t.Fatalf("with a target and no grant: step %s, want Staged", got)
	}
	if w.staged != "os-2" || w.node.Spec.Unschedulable {
		t.Fatalf("staging must stage without disruption: staged %q, unschedulable %v", w.staged, w.node.Spec.Unschedulable)
	}
	w.set(func(w *world) { w.desired.Grant = "g1" })
	if got := settle(t, m); got != v1alpha1.StepRebooting {
		t.Fatalf("after the grant: step %s, want Rebooting", got)
	}
	if w.totalReboots != 1 || !w.wasEverDrained || !w.node.Spec.Unschedulable || w.finalized != "os-2" {
		t.Fatalf("before the boot: reboots %d drained %v unschedulable %v finalized %q",
			w.totalReboots, w.wasEverDrained, w.node.Spec.Unschedulable, w.finalized)
	}
	w.boot(false)
	m = w.machine(dir) // the agent starts again after the boot
	if got := settle(t, m); got != v1alpha1.StepDone {
		t.Fatalf("after the boot: step %s, want Done", got)
	}
	if w.booted != "os-2" || w.node.Spec.Unschedulable || w.uncordonedByUs != 1 || w.totalReboots != 1 {
		t.Fatalf("after Done: booted %q unschedulable %v uncordons %d reboots %d",
			w.booted, w.node.Spec.Unschedulable, w.uncordonedByUs, w.totalReboots)
	}
	if !m.State().StagedBeforeSlot {
		t.Fatalf("staged before the grant, but StagedBeforeSlot is false")
	}
	want := []v1alpha1.Step{v1alpha1.StepIdle, v1alpha1.StepStaging, v1alpha1.StepStaged, v1alpha1.StepGranted, v1alpha1.StepHooksPreDrain, v1alpha1.StepCordoning, v1alpha1.StepDraining,
		v1alpha1.StepHooksPreReboot, v1alpha1.StepFinalizing, v1alpha1.StepRebooting, v1alpha1.StepVerifying, v1alpha1.StepWaitingHealthy, v1alpha1.StepUncordoning, v1alpha1.StepDone}
	if !slices.Equal(w.reported, want) {
		t.Fatalf("reported steps\n got %v\nwant %v", w.reported, want)
	}
	// A new target starts a new cycle from Done.
	w.set(func(w *world) { w.desired = Desired{Target: "os-3"} })
	if got := settle(t, m); got != v1alpha1.StepStaged {
		t.Fatalf("new target after Done: step %s, want Staged", got)
	}
}

// TestResumeAtEveryStep crashes the agent at every step of the cycle — both
// right after the step was persisted and right after its action ran but
// before the next step was persisted — and checks that the restarted agent
// finishes with one reboot, no cordon left and a finished drain first.
func TestResumeAtEveryStep(t *testing.T) {
	t.Parallel()
	steps := []v1alpha1.Step{v1alpha1.StepStaging, v1alpha1.StepStaged, v1alpha1.StepGranted, v1alpha1.StepHooksPreDrain, v1alpha1.StepCordoning, v1alpha1.StepDraining,
		v1alpha1.StepHooksPreReboot, v1alpha1.StepFinalizing, v1alpha1.StepRebooting, v1alpha1.StepVerifying, v1alpha1.StepWaitingHealthy, v1alpha1.StepUncordoning}
	for _, crashAt := range steps {
		for _, actionDone := range []bool{false, true} {
			t.Run(fmt.Sprintf("%s/actionDone=%v", crashAt, actionDone), func(t *testing.T) {
				t.Parallel()
				w := newWorld(t, "os-1")
				w.desired = Desired{Target: "os-2", Grant: "g1"}
				dir := t.TempDir()
				m := w.machine(dir)
				booted := false
				if slices.Index(steps, crashAt) > slices.Index(steps, v1alpha1.StepRebooting) {
					runUntil(t, m, v1alpha1.StepRebooting)
					settle(t, m)
					w.boot(false)
					booted = true
					m = w.machine(dir)
				}
				runUntil(t, m, crashAt)
				if actionDone {
					// The action ran, the crash came before its result
					// was persisted.
					if _, err := m.run(t.Context(), w.node.DeepCopy(), w.desired); err != nil {
						t.Fatalf("action of %s: %v", crashAt, err)
					}
				}
				m = w.machine(dir) // restart from the state file alone
				settle(t, m)
				if !booted {
					if got := m.State().Step; got != v1alpha1.StepRebooting {
						t.Fatalf("resumed agent waits in %s, want Rebooting", got)
					}
					w.boot(false)
					m = w.machine(dir)
					settle(t, m)
				}
				if got := m.State().Step; got != v1alpha1.StepDone {
					t.Fatalf("resumed agent ends in %s, want Done (reported %v)", got, w.reported)
				}
				if w.totalReboots != 1 {
					t.Fatalf("%d reboots, want exactly 1", w.totalReboots)
				}
				if w.rebootUndrained {
					t.Fatalf("rebooted before the drain finished")
				}
				if w.node.Spec.Unschedulable || w.cordonedByUs {
					t.Fatalf("cordon left behind")
				}
				if w.booted != "os-2" {
					t.Fatalf("booted %q, want os-2", w.booted)
				}
			})
		}
	}
}

// TestCrashBetweenPersistAndReboot: the step Rebooting is on disk but the
// machine never went down; the restarted agent must ask again, once.
func TestCrashBetweenPersistAndReboot(t *testing.T) {
	t.Parallel()
	w := newWorld(t, "os-1")
	w.desired = Desired{Target: "os-2", Grant: "g1"}
	dir := t.TempDir()
	m := w.machine(dir)
	runUntil(t, m, v1alpha1.StepRebooting) // persisted, Reboot not yet called
	if w.totalReboots != 0 {
		t.Fatalf("reboot asked before Rebooting was persisted")
	}
	m = w.machine(dir)
	settle(t, m)
	settle(t, m) // waiting for the machine to go down: no second request
	if w.reboots != 1 {
		t.Fatalf("%d reboot requests, want 1", w.reboots)
	}
}

func TestAdminCordonedNodeIsLeftAlone(t *testing.T) {
	t.Parallel()
	w := newWorld(t, "os-1")
	w.node.Spec.Unschedulable = true // an admin's cordon
	w.desired = Desired{Target: "os-2", Grant: "g1"}
	m := w.machine(t.TempDir())
	if got := settle(t, m); got != v1alpha1.StepYielded {
		t.Fatalf("admin-cordoned node: step %s, want Yielded", got)
	}
	if !w.node.Spec.Unschedulable || w.uncordonedByUs != 0 || w.totalReboots != 0 || w.wasEverDrained {
		t.Fatalf("admin-cordoned node was touched: unschedulable %v uncordons %d reboots %d drained %v",
			w.node.Spec.Unschedulable, w.uncordonedByUs, w.totalReboots, w.wasEverDrained)
	}
	// The coordinator takes the grant back: the node waits staged again.
	w.set(func(w *world) { w.desired.Grant = "" })
	if got := settle(t, m); got != v1alpha1.StepStaged {
		t.Fatalf("after the grant is withdrawn: step %s, want Staged", got)
	}
}

func TestBlockedDrainYieldsWhenThePoolSaysSo(t *testing.T) {
	t.Parallel()
	w := newWorld(t, "os-1")
	w.drainErr = fmt.Errorf("pod a/b: %w", drain.ErrBlocked)
	w.desired = Desired{Target: "os-2", Grant: "g1", YieldOnDrainTimeout: true, DrainTimeout: 30 * time.Second}
	m := w.machine(t.TempDir())
	if got := settle(t, m); got != v1alpha1.StepDraining {
		t.Fatalf("blocked drain: step %s, want Draining", got)
	}
	w.advance(20 * time.Second)
	if got := settle(t, m); got != v1alpha1.StepDraining {
		t.Fatalf("blocked drain within its timeout: step %s, want Draining", got)
	}
	w.advance(20 * time.Second)
	if got := settle(t, m); got != v1alpha1.StepYielded {
		t.Fatalf("blocked drain past its timeout: step %s, want Yielded", got)
	}
	if w.node.Spec.Unschedulable || w.totalReboots != 0 {
		t.Fatalf("yield must undo nodeward's cordon and not reboot: unschedulable %v reboots %d",
			w.node.Spec.Unschedulable, w.totalReboots)
	}
	if m.State().Reason == "" {
		t.Fatalf("Yielded without a reason")
	}
}

func TestBlockedDrainKeepsTryingWithoutYield(t *testing.T) {
	t.Parallel()
	w := newWorld(t, "os-1")
	w.drainErr = drain.ErrBlocked
	w.desired = Desired{Target: "os-2", Grant: "g1"}
	m := w.machine(t.TempDir())
	settle(t, m)
	w.advance(time.Hour)
	if got := settle(t, m); got != v1alpha1.StepDraining {
		t.Fatalf("step %s, want Draining", got)
	}
	w.set(func(w *world) { w.drainErr = nil })
	if got := settle(t, m); got != v1alpha1.StepRebooting {
		t.Fatalf("after the PDB allows it: step %s, want Rebooting", got)
	}
}

func TestHooksHoldTheirSteps(t *testing.T) {
	t.Parallel()
	w := newWorld(t, "os-1")
	w.node.Annotations[v1alpha1.PreDrainHookPrefix+"quorum"] = "etcd-guard"
	w.node.Annotations[v1alpha1.PreRebootHookPrefix+"detach"] = "storage"
	w.desired = Desired{Target: "os-2", Grant: "g1"}
	m := w.machine(t.TempDir())
	if got := settle(t, m); got != v1alpha1.StepHooksPreDrain || w.node.Spec.Unschedulable {
		t.Fatalf("pre-drain hook present: step %s unschedulable %v, want HooksPreDrain and schedulable", got, w.node.Spec.Unschedulable)
	}
	w.set(func(w *world) { delete(w.node.Annotations, v1alpha1.PreDrainHookPrefix+"quorum") })
	if got := settle(t, m); got != v1alpha1.StepHooksPreReboot || w.finalized != "" {
		t.Fatalf("pre-reboot hook present: step %s finalized %q, want HooksPreReboot and nothing finalized", got, w.finalized)
	}
	w.set(func(w *world) { delete(w.node.Annotations, v1alpha1.PreRebootHookPrefix+"detach") })
	if got := settle(t, m); got != v1alpha1.StepRebooting {
		t.Fatalf("hooks removed: step %s, want Rebooting", got)
	}
}

func TestFailedVerificationRollsBackAndDegrades(t *testing.T) {
	t.Parallel()
	w, dir := rebooting(t)
	w.boot(true) // the new deployment did not come up
	m := w.machine(dir)
	if got := settle(t, m); got != v1alpha1.StepRebooting || !w.rolledBack {
		t.Fatalf("failed verification: step %s rolledBack %v, want Rebooting into the rollback", got, w.rolledBack)
	}
	w.boot(false)
	m = w.machine(dir)
	if got := settle(t, m); got != v1alpha1.StepDegraded {
		t.Fatalf("after the rollback boot: step %s, want Degraded", got)
	}
	if w.booted != "os-1" || !w.node.Spec.Unschedulable || w.totalReboots != 2 {
		t.Fatalf("degraded node: booted %q unschedulable %v reboots %d; want os-1, cordoned, 2",
			w.booted, w.node.Spec.Unschedulable, w.totalReboots)
	}
	if st := m.State(); !st.Step.HoldsSlot() || st.Reason == "" {
		t.Fatalf("degraded node must keep its slot and say why: %+v", st)
	}
	// The operator publishes a new target: the node updates to it.
	w.set(func(w *world) { w.desired = Desired{Target: "os-3", Grant: "g2"} })
	if got := settle(t, m); got != v1alpha1.StepRebooting {
		t.Fatalf("new target after Degraded: step %s, want Rebooting", got)
	}
	w.boot(false)
	m = w.machine(dir)
	if got := settle(t, m); got != v1alpha1.StepDone || w.node.Spec.Unschedulable {
		t.Fatalf("after the new target: step %s unschedulable %v", got, w.node.Spec.Unschedulable)
	}
}

func TestWaitsForHealthThenDegrades(t *testing.T) {
	t.Parallel()
	w, dir := rebooting(t)
	w.boot(false)
	w.set(func(w *world) {
		w.node.Status.Conditions = append(w.node.Status.Conditions,
			corev1.NodeCondition{Type: v1alpha1.ConditionDiskPressure, Status: corev1.ConditionTrue})
	})
	m := w.machine(dir)
	if got := settle(t, m); got != v1alpha1.StepWaitingHealthy || !w.node.Spec.Unschedulable {
		t.Fatalf("unhealthy after boot: step %s unschedulable %v", got, w.node.Spec.Unschedulable)
	}
	w.advance(2 * time.Minute)
	if got := settle(t, m); got != v1alpha1.StepDegraded {
		t.Fatalf("unhealthy past the timeout: step %s, want Degraded", got)
	}
}

func TestGrantBeforeStagingCountsAsNotPreStaged(t *testing.T) {
	t.Parallel()
	w := newWorld(t, "os-1")
	w.desired = Desired{Target: "os-2", Grant: "g1"}
	m := w.machine(t.TempDir())
	settle(t, m)
	if m.State().StagedBeforeSlot {
		t.Fatalf("grant came before staging, but StagedBeforeSlot is true")
	}
}

func TestAlreadyOnTargetReportsDone(t *testing.T) {
	t.Parallel()
	w := newWorld(t, "os-2")
	w.desired = Desired{Target: "os-2", Grant: "g1"}
	m := w.machine(t.TempDir())
	if got := settle(t, m); got != v1alpha1.StepDone || w.totalReboots != 0 || w.node.Spec.Unschedulable {
		t.Fatalf("node already on the target: step %s reboots %d unschedulable %v", got, w.totalReboots, w.node.Spec.Unschedulable)
	}
}

func TestStagingFailureIsRetried(t *testing.T) {
	t.Parallel()
	w := newWorld(t, "os-1")
	w.stageErr = errors.New("registry unreachable")
	w.desired = Desired{Target: "os-2"}
	m := w.machine(t.TempDir())
	runUntil(t, m, v1alpha1.StepStaging)
	if _, err := m.Advance(t.Context()); err == nil {
		t.Fatalf("staging error not returned")
	}
	w.set(func(w *world) { w.stageErr = nil })
	if got := settle(t, m); got != v1alpha1.StepStaged {
		t.Fatalf("after the registry is back: step %s, want Staged", got)
	}
}

func TestStore(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	store := Store{Path: filepath.Join(dir, "sub", "state.json")}
	st, err := store.Load()
	if err != nil || st.Step != v1alpha1.StepIdle {
		t.Fatalf("missing file: %+v, %v; want Idle", st, err)
	}
	want := State{Step: v1alpha1.StepDraining, Target: "os-2", Grant: "g", Cordoned: true, StepSince: time.Unix(5, 0).UTC()}
	if err := store.Save(want); err != nil {
		t.Fatal(err)
	}
	got, err := store.Load()
	if err != nil || got != want {
		t.Fatalf("round trip: got %+v, %v; want %+v", got, err, want)
	}
	entries, _ := os.ReadDir(filepath.Dir(store.Path))
	if len(entries) != 1 {
		t.Fatalf("temporary files left behind: %v", entries)
	}
	for name, content := range map[string]string{"torn": `{"step":"Drai`, "unknown": `{"step":"Exploding"}`} {
		bad := Store{Path: filepath.Join(dir, name)}
		if err := os.WriteFile(bad.Path, []byte(content), 0o600); err != nil {
			t.Fatal(err)
		}
		if _, err := bad.Load(); err == nil {
			t.Fatalf("%s state file accepted", name)
		}
	}
}

func FuzzStateLoad(f *testing.F) {
	f.Add([]byte(`{"step":"Draining","target":"os-2","cordoned":true}`))
	f.Add([]byte(`{"step":"Rebooting","bootID":"x","stepSince":"2024-01-01T00:00:00Z"}`))
	f.Add([]byte(`not json`))
	f.Fuzz(func(t *testing.T, data []byte) {
		path := filepath.Join(t.TempDir(), "state.json")
		if err := os.WriteFile(path, data, 0o600); err != nil {
			t.Fatal(err)
		}
		st, err := Store{Path: path}.Load()
		if err == nil && !st.Step.Valid() {
			t.Fatalf("accepted invalid step %q", st.Step)
		}
	})
}

// TestFinalizeThatRebootsByItself: rpm-ostree's finalize-deployment reboots
// the host as soon as it unlocks the deployment, before the agent can
// persist anything after it. The agent must resume into verification
// after the boot, never finalize or reboot again.
func TestFinalizeThatRebootsByItself(t *testing.T) {
	t.Parallel()
	w := newWorld(t, "os-1")
	w.desired = Desired{Target: "os-2", Grant: "g1"}
	dir := t.TempDir()
	m := w.machine(dir)
	runUntil(t, m, v1alpha1.StepFinalizing)
	if err := w.Finalize(t.Context(), "os-2"); err != nil {
		t.Fatal(err)
	}
	if err := w.Reboot(t.Context(), "finalize-deployment"); err != nil { // what rpm-ostree does
		t.Fatal(err)
	}
	w.boot(false)
	m = w.machine(dir)
	if got := settle(t, m); got != v1alpha1.StepDone {
		t.Fatalf("after a reboot done by finalization: step %s, want Done (reported %v)", got, w.reported)
	}
	if w.totalReboots != 1 || w.booted != "os-2" || w.node.Spec.Unschedulable {
		t.Fatalf("reboots %d booted %s unschedulable %v; want 1, os-2, schedulable", w.totalReboots, w.booted, w.node.Spec.Unschedulable)
	}
}
