package protosim

import (
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"time"

	corev1 "k8s.io/api/core/v1"

	"github.com/nodeward/nodeward/api/v1alpha1"
	"github.com/nodeward/nodeward/daemon/update"
	"github.com/nodeward/nodeward/drain"
)

// agent is one node's real update.Machine wired to the world model through
// its ports. A kill drops the machine; the next start builds a new one from
// the persisted store, as a restarted process would.
type agent struct {
	w       *World
	name    string
	store   *memStore
	machine *update.Machine
}

// memStore is the state directory: it survives a kill, not a state loss.
type memStore struct {
	st  update.State
	set bool
}

func (s *memStore) Load() (update.State, error) {
	if !s.set {
		return update.State{Step: v1alpha1.StepIdle}, nil
	}
	return s.st, nil
}

func (s *memStore) Save(st update.State) error { s.st, s.set = st, true; return nil }

var errAPIDown = errors.New("simulated API failure")

func (a *agent) start() {
	h := a.w.hosts[a.name]
	edge := finalizeChecked{host: h, w: a.w, name: a.name}
	m, err := update.NewMachine(update.Config{
		Store: a.store, Node: a, Protocol: a, OS: edge, Reboot: edge, BootID: h.BootID, Workloads: a,
		Log: slog.New(slog.NewTextHandler(io.Discard, nil)), Now: a.w.clock,
		DrainTimeout: 3 * time.Minute, HealthTimeout: 10 * time.Minute, RebootRetry: 5 * time.Minute,
	})
	if err != nil {
		panic(err) // a wiring bug of the simulator itself
	}
	a.machine = m
}

// Node implements update.NodeSource: a GET of the Node.
func (a *agent) Node(context.Context) (*corev1.Node, error) {
	n, ok := a.w.nodes[a.name]
	if !ok {
		return nil, fmt.Errorf("node %s not found", a.name)
	}
	if a.w.apiFails() {
		return nil, errAPIDown
	}
	return n.DeepCopy(), nil
}

// Desired implements update.Protocol with the real annotation protocol.
func (a *agent) Desired(ctx context.Context, node *corev1.Node) (update.Desired, error) {
	return (&update.AnnotationProtocol{}).Desired(ctx, node)
}

// Report implements update.Protocol: the real agent's patch, applied to the
// model (or lost, when the API fails).
func (a *agent) Report(_ context.Context, st update.State) error {
	if a.w.apiFails() {
		return errAPIDown
	}
	a.w.logf("%s: reports %s", a.name, st.Step)
	return a.w.patchAnnotations(a.name, update.ReportAnnotations(st))
}

// Cordon implements update.Workloads as the drain package does: the cordon
// and its record in one write; an admin's cordon is left alone.
func (a *agent) Cordon(context.Context) (bool, error) {
	if a.w.apiFails() {
		return false, errAPIDown
	}
	n, ok := a.w.nodes[a.name]
	if !ok {
		return false, fmt.Errorf("node %s not found", a.name)
	}
	_, ours := n.Annotations[v1alpha1.AnnotationCordonedBy]
	if n.Spec.Unschedulable && !ours {
		return false, nil
	}
	a.w.checkHooksHonoured(a.name, drain.PreDrain, "cordon")
	n.Spec.Unschedulable = true
	n.Annotations[v1alpha1.AnnotationCordonedBy] = "nodeward"
	a.w.bump(n)
	return true, nil
}

// Drain implements update.Workloads: blocked while a PDB pins a pod.
func (a *agent) Drain(context.Context) error {
	if a.w.apiFails() {
		return errAPIDown
	}
	if a.w.pdbBlocked[a.name] {
		return fmt.Errorf("%w: a PDB allows no disruption", drain.ErrBlocked)
	}
	a.w.drained[a.name] = a.w.nodes[a.name].UID
	return nil
}

// Undrained implements update.Workloads: pods bound after the drain (the
// "pod bound to a cordoned node" fault) undo it.
func (a *agent) Undrained(context.Context) ([]drain.PodRef, error) {
	if a.w.apiFails() {
		return nil, errAPIDown
	}
	if n := a.w.nodes[a.name]; n != nil && a.w.drained[a.name] != n.UID {
		return []drain.PodRef{{Namespace: "apps", Name: "late-" + a.name}}, nil
	}
	return nil, nil
}

// ForceDrain implements update.Workloads: the blockers are deleted.
func (a *agent) ForceDrain(context.Context) error {
	if a.w.apiFails() {
		return errAPIDown
	}
	a.w.drained[a.name] = a.w.nodes[a.name].UID
	return nil
}

// Uncordon implements update.Workloads: only nodeward's own cordon.
func (a *agent) Uncordon(context.Context) error {
	if a.w.apiFails() {
		return errAPIDown
	}
	n, ok := a.w.nodes[a.name]
	if !ok {
		return fmt.Errorf("node %s not found", a.name)
	}
	if _, ours := n.Annotations[v1alpha1.AnnotationCordonedBy]; !ours {
		return nil
	}
	if a.w.adminCordoned[a.name] {
		a.w.violate("uncordon of %s, which an admin cordoned", a.name)
	}
	n.Spec.Unschedulable = false
	delete(n.Annotations, v1alpha1.AnnotationCordonedBy)
	delete(a.w.drained, a.name)
	a.w.bump(n)
	return nil
}

// ReportHooks implements update.Workloads.
func (a *agent) ReportHooks(context.Context, drain.HookPoint, []drain.Hook) error { return nil }
