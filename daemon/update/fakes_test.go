package update

import (
	"context"
	"fmt"
	"io"
	"log/slog"
	"path/filepath"
	"slices"
	"sync"
	"testing"
	"time"

	v1alpha1 "github.com/nodeward/nodeward/api/v1alpha1"
	"github.com/nodeward/nodeward/drain"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
)

// world is a plain fake of everything the update machine touches: the OS,
// the reboot, the drain, the node and the coordinator's annotations. It
// enforces the invariants the machine must keep and records violations.
type world struct {
	mu sync.Mutex
	t  *testing.T

	// OS
	booted, staged, finalized string
	previous                  string // what a rollback boots
	bootID                    int
	rolledBack                bool
	stageErr                  error
	reboots                   int // reboot requests in the current boot
	totalReboots              int // reboots: boots in which a reboot was asked for

	// node
	node         *corev1.Node
	cordonedByUs bool
	drainErr     error
	// lateBound are pods bound to the node after its drain finished.
	lateBound       []drain.PodRef
	drained         bool
	uncordonedByUs  int
	wasEverDrained  bool
	rebootUndrained bool
	forceDrains     int

	// protocol
	desired    Desired
	desiredErr error
	// finalizeGate, when set, makes Finalize block between two messages.
	finalizeGate chan struct{}
	reported     []v1alpha1.Step
	now          time.Time
}

func newWorld(t *testing.T, booted string) *world {
	node := &corev1.Node{
		ObjectMeta: metav1.ObjectMeta{Name: "n1", UID: "uid-1", Annotations: map[string]string{}},
		Status: corev1.NodeStatus{Conditions: []corev1.NodeCondition{
			{Type: corev1.NodeReady, Status: corev1.ConditionTrue},
		}},
	}
	return &world{t: t, booted: booted, previous: booted, node: node, now: time.Unix(1_700_000_000, 0)}
}

// OSUpdater
func (w *world) Booted(context.Context) (string, error) {
	w.mu.Lock()
	defer w.mu.Unlock()
	return w.booted, nil
}
func (w *world) Stage(_ context.Context, target string) error {
	w.mu.Lock()
	defer w.mu.Unlock()
	if w.stageErr != nil {
		return w.stageErr
	}
	w.staged, w.finalized = target, ""
	return nil
}
func (w *world) Finalize(ctx context.Context, target string) error {
	if w.finalizeGate != nil {
		w.finalizeGate <- struct{}{} // the finalize has started
		<-w.finalizeGate             // the test lets it finish
		if err := ctx.Err(); err != nil {
			return fmt.Errorf("finalize cut by the shutdown: %w", err)
		}
	}
	w.mu.Lock()
	defer w.mu.Unlock()
	if w.staged != target {
		return fmt.Errorf("finalize %s: staged is %q", target, w.staged)
	}
	w.finalized = target
	return nil
}
func (w *world) Rollback(context.Context) error {
	w.mu.Lock()
	defer w.mu.Unlock()
	w.rolledBack, w.finalized = true, ""
	return nil
}

// Rebooter
func (w *world) Reboot(context.Context, string) error {
	w.mu.Lock()
	defer w.mu.Unlock()
	if !w.drained || len(w.lateBound) > 0 {
		w.rebootUndrained = true
	}
	// Asking again in the same boot is the same reboot (logind is
	// already shutting down); only a request in a new boot is another one.
	if w.reboots == 0 {
		w.totalReboots++
	}
	w.reboots++
	return nil
}

func (w *world) BootID() (string, error) {
	w.mu.Lock()
	defer w.mu.Unlock()
	return fmt.Sprintf("boot-%d", w.bootID), nil
}

// boot simulates the machine coming back after a reboot was asked for.
// bad boots the new deployment broken: it comes up, but not as the target
// (verification fails and the machine must roll back).
func (w *world) boot(bad bool) {
	w.mu.Lock()
	defer w.mu.Unlock()
	if w.reboots == 0 {
		w.t.Fatalf("boot without a reboot request")
	}
	w.reboots = 0
	w.bootID++
	switch {
	case w.rolledBack:
		w.booted = w.previous
		w.rolledBack = false
	case w.finalized != "" && bad:
		w.previous, w.booted = w.booted, w.finalized+"-broken"
		w.staged, w.finalized = "", ""
	case w.finalized != "":
		w.previous, w.booted = w.booted, w.finalized
		w.staged, w.finalized = "", ""
	}
}

// bootUnplanned reboots the machine without anyone asking (a power cut,
// a kernel panic, a failed ostree-finalize-staged): the running OS comes
// back and a staged deployment, locked or finalized, is lost.
func (w *world) bootUnplanned() {
	w.mu.Lock()
	defer w.mu.Unlock()
	w.reboots = 0
	w.bootID++
	w.staged, w.finalized = "", ""
}

// Workloads
func (w *world) Cordon(context.Context) (bool, error) {
	w.mu.Lock()
	defer w.mu.Unlock()
	if w.node.Spec.Unschedulable && !w.cordonedByUs {
		return false, nil
	}
	w.node.Spec.Unschedulable, w.cordonedByUs = true, true
	w.node.Annotations[v1alpha1.AnnotationCordonedBy] = "nodeward"
	return true, nil
}
func (w *world) Drain(context.Context) error {
	w.mu.Lock()
	defer w.mu.Unlock()
	if !w.node.Spec.Unschedulable {
		w.t.Errorf("drain of a schedulable node")
	}
	if w.drainErr != nil {
		return w.drainErr
	}
	w.drained, w.wasEverDrained, w.lateBound = true, true, nil
	return nil
}

func (w *world) Undrained(context.Context) ([]drain.PodRef, error) {
	w.mu.Lock()
	defer w.mu.Unlock()
	return slices.Clone(w.lateBound), nil
}

// ForceDrain deletes whatever blocks: it always drains.
func (w *world) ForceDrain(context.Context) error {
	w.mu.Lock()
	defer w.mu.Unlock()
	w.forceDrains++
	w.drained, w.wasEverDrained, w.lateBound = true, true, nil
	return nil
}
func (w *world) ReportHooks(context.Context, drain.HookPoint, []drain.Hook) error { return nil }
func (w *world) Uncordon(context.Context) error {
	w.mu.Lock()
	defer w.mu.Unlock()
	if _, ours := w.node.Annotations[v1alpha1.AnnotationCordonedBy]; ours || w.cordonedByUs {
		w.node.Spec.Unschedulable, w.cordonedByUs = false, false
		delete(w.node.Annotations, v1alpha1.AnnotationCordonedBy)
		w.uncordonedByUs++
	}
	w.drained = false
	return nil
}

// NodeSource
func (w *world) Node(context.Context) (*corev1.Node, error) {
	w.mu.Lock()
	defer w.mu.Unlock()
	return w.node.DeepCopy(), nil
}

// Protocol
// Desired is w.desired; like the coordinator, it issues a grant for the
// target unless a test names another.
func (w *world) Desired(context.Context, *corev1.Node) (Desired, error) {
	w.mu.Lock()
	defer w.mu.Unlock()
	d := w.desired
	if d.Grant != "" && d.GrantTarget == "" {
		d.GrantTarget = d.Target
	}
	return d, w.desiredErr
}
func (w *world) Report(_ context.Context, st State) error {
	w.mu.Lock()
	defer w.mu.Unlock()
	if n := len(w.reported); n == 0 || w.reported[n-1] != st.Step {
		w.reported = append(w.reported, st.Step)
	}
	return nil
}

func (w *world) set(f func(w *world)) { w.mu.Lock(); defer w.mu.Unlock(); f(w) }

func (w *world) clock() time.Time { w.mu.Lock(); defer w.mu.Unlock(); return w.now }

func (w *world) advance(d time.Duration) { w.set(func(w *world) { w.now = w.now.Add(d) }) }

// machine builds an update machine on w with its state in dir, as a fresh
// agent process would after a (re)start.
func (w *world) machine(dir string) *Machine {
	w.t.Helper()
	return w.machineWith(dir, w, w)
}

// machineWith is machine with another OS updater and drainer (ones that
// wrap w).
func (w *world) machineWith(dir string, os OSUpdater, workloads Workloads) *Machine {
	w.t.Helper()
	m, err := NewMachine(Config{
		Store: Store{Path: filepath.Join(dir, "update-state.json")},
		Node:  w, Protocol: w, OS: os, Reboot: w, BootID: w.BootID, Workloads: workloads,
		Log:          slog.New(slog.NewTextHandler(io.Discard, nil)),
		Now:          w.clock,
		DrainTimeout: time.Minute, HealthTimeout: time.Minute, RebootRetry: time.Hour,
	})
	if err != nil {
		w.t.Fatal(err)
	}
	return m
}

// settle advances m until it waits, failing after too many steps.
func settle(t *testing.T, m *Machine) v1alpha1.Step {
	t.Helper()
	for range 50 {
		progressed, err := m.Advance(context.Background())
		if err != nil {
			t.Fatalf("step %s: %v", m.State().Step, err)
		}
		if !progressed {
			return m.State().Step
		}
	}
	t.Fatalf("machine does not settle; at %s", m.State().Step)
	return ""
}

// runUntil advances m until it enters step want, failing when it waits
// somewhere else first.
func runUntil(t *testing.T, m *Machine, want v1alpha1.Step) {
	t.Helper()
	for range 50 {
		if m.State().Step == want {
			return
		}
		progressed, err := m.Advance(context.Background())
		if err != nil {
			t.Fatalf("step %s: %v", m.State().Step, err)
		}
		if !progressed && m.State().Step != want {
			t.Fatalf("machine waits in %s before reaching %s", m.State().Step, want)
		}
	}
	t.Fatalf("machine never reached %s", want)
}

// rebooting is a node updating from os-1 to os-2 under grant g1, run until
// its agent asked for the reboot; the caller boots it and starts a new
// machine on dir, as after a real reboot.
func rebooting(t *testing.T) (*world, string) {
	t.Helper()
	w := newWorld(t, "os-1")
	w.desired = Desired{Target: "os-2", Grant: "g1"}
	dir := t.TempDir()
	if got := settle(t, w.machine(dir)); got != v1alpha1.StepRebooting {
		t.Fatalf("with a grant: step %s, want Rebooting", got)
	}
	return w, dir
}
