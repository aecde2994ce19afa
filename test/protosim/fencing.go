package protosim

import (
	"context"
	"fmt"
	"math/rand/v2"

	corev1 "k8s.io/api/core/v1"

	"github.com/nodeward/nodeward/api/v1alpha1"
	"github.com/nodeward/nodeward/coordinator"
	"github.com/nodeward/nodeward/daemon/update"
)

// The fenced mode (Scenario.Fenced, which fresh seeds play) models the
// grants' fencing token (docs/protocol.md, "Fencing"): every leader holds a
// term of the leader Lease and writes it with its grants, every agent
// checks a grant's term against the Lease's before it takes the grant, and
// a leader may be paused (SIGSTOP, a VM freeze) right after it planned a
// pass: another replica takes over, and the paused one, resumed later,
// writes what it planned, conditional as ever on each node's
// resourceVersion. Its draws come from a third stream (World.fence), so
// the classic and extended schedules stay what they were.

// fenceFaultPercent is how often, in fenced mode, a fault-phase event is a
// fencing fault.
const fenceFaultPercent = 1

// pausedLeader is a leader stopped after it planned a pass, with the
// writes of that pass not made yet.
type pausedLeader struct {
	coord  *coordinatorModel
	writes []coordinator.Write
}

// newFenceStream is the fenced mode's stream.
func newFenceStream(seed uint64) *rand.Rand {
	return rand.New(rand.NewPCG(seed^0x6a09e667f3bcc908, seed+0xbb67ae8584caa73b))
}

// newKubeletStream is the fenced mode's fourth stream (World.kubelet).
func newKubeletStream(seed uint64) *rand.Rand {
	return rand.New(rand.NewPCG(seed^0x3c6ef372fe94f82b, seed+0xa54ff53a5f1d36f1))
}

// takeOver is a new leader's acquisition of the Lease: the next term,
// which it returns; nil outside the fenced mode.
func (w *World) takeOver() *v1alpha1.LeaderTerm {
	if w.fence == nil {
		return nil
	}
	n := w.termCount + 1
	w.termCount = n
	term := v1alpha1.LeaderTerm{Lease: "nodeward-system/" + coordinator.LeaderLeaseName, UID: "lease-1",
		Transitions: n, Holder: fmt.Sprintf("replica-%d", n)}
	w.termValue = term.String()
	return &term
}

// fenceFault pauses the leader right after it planned a pass, handing the
// Lease to a new one; or, when one is paused, resumes it.
func (w *World) fenceFault() string {
	if p := w.paused; p != nil {
		w.resumePaused()
		return "paused leader resumed"
	}
	c := w.coord
	var held []coordinator.Write
	c.held = &held
	c.reconcile()
	c.held = nil
	w.paused = &pausedLeader{coord: c, writes: held}
	w.failover()
	w.logf("FAULT leader paused (term %d) with %d planned writes; term %d leads", c.term.Transitions, len(held), w.termCount)
	return "leader paused"
}

// resumePaused makes the paused leader's planned writes, as a process
// resumed after the Lease moved on would before it notices.
func (w *World) resumePaused() {
	p := w.paused
	if p == nil {
		return
	}
	w.paused = nil
	p.coord.deposed = true
	w.logf("FAULT paused leader (term %d) resumes with %d planned writes", p.coord.term.Transitions, len(p.writes))
	for _, wr := range p.writes {
		if wr.Pool != "" {
			if !p.coord.writePool(wr) {
				break // reconcile returns at a failed pool write
			}
			continue
		}
		p.coord.write(wr)
	}
}

// StaleTerm implements update.TermChecker as the real protocol does, with
// the model's Lease: a read that may fail, then the terms compared.
func (a *agent) StaleTerm(_ context.Context, want update.Desired) (string, error) {
	if want.GrantTerm == "" {
		return "", nil
	}
	if a.w.apiFails() {
		return "", errAPIDown
	}
	if want.GrantTerm != a.w.termValue {
		return fmt.Sprintf("grant %s of a deposed leader", want.Grant), nil
	}
	return "", nil
}

// countable is n as the invariants count it: in fenced mode, a grant of a
// deposed leader's term that its agent has not acted on disrupts nothing
// (the agent refuses it before any cordon), so it is left out; what an
// agent did with such a grant (a step, a cordon) still counts.
func (w *World) countable(n *corev1.Node) *corev1.Node {
	term := n.Annotations[v1alpha1.AnnotationGrantTerm]
	if w.fence == nil || term == "" || term == w.termValue ||
		n.Annotations[v1alpha1.AnnotationStateGrant] == n.Annotations[v1alpha1.AnnotationGrant] {
		return n
	}
	c := n.DeepCopy()
	for _, k := range v1alpha1.ReleaseKeys() {
		delete(c.Annotations, k)
	}
	return c
}
