package update

import (
	"strings"
	"testing"

	coordinationv1 "k8s.io/api/coordination/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/utils/ptr"

	v1alpha1 "github.com/nodeward/nodeward/api/v1alpha1"
)

// leaderLease creates a leader Lease named name in default, held by holder
// in its first term, and returns it.
func (a *apiWorld) leaderLease(name, holder string) *coordinationv1.Lease {
	a.t.Helper()
	lease, err := a.client.Leases("default").Create(a.t.Context(), &coordinationv1.Lease{
		ObjectMeta: metav1.ObjectMeta{Name: name, Namespace: "default"},
		Spec:       coordinationv1.LeaseSpec{HolderIdentity: ptr.To(holder), LeaseTransitions: ptr.To(int32(0))},
	}, metav1.CreateOptions{})
	if err != nil {
		a.t.Fatalf("create leader Lease: %v", err)
	}
	return lease
}

// takeOver moves lease to holder in the next term, as a replica taking
// over an expired Lease does.
func (a *apiWorld) takeOver(lease *coordinationv1.Lease, holder string) *coordinationv1.Lease {
	a.t.Helper()
	next := lease.DeepCopy()
	next.Spec.HolderIdentity = ptr.To(holder)
	next.Spec.LeaseTransitions = ptr.To(*lease.Spec.LeaseTransitions + 1)
	updated, err := a.client.Leases("default").Update(a.t.Context(), next, metav1.UpdateOptions{})
	if err != nil {
		a.t.Fatalf("take over the leader Lease: %v", err)
	}
	return updated
}

// grantInTerm writes target and a grant issued for it in term.
func (a *apiWorld) grantInTerm(target, grant, term string) {
	a.coordinator(map[string]*string{v1alpha1.AnnotationTarget: &target, v1alpha1.AnnotationGrant: &grant,
		v1alpha1.AnnotationGrantTarget: &target, v1alpha1.AnnotationGrantTerm: &term})
}

// A coordinator leader paused past its Lease (SIGSTOP, a VM freeze) while
// another replica took over may, on resuming, write a grant it planned
// before the pause. The agent reads the leader Lease before it takes a
// grant: one issued in a past term is yielded without a cordon; one of the
// current term is used. Without the check the deposed leader's grant
// cordoned, drained and rebooted a node the new leader counted available.
func TestGrantOfADeposedLeaderIsNeverUsed(t *testing.T) {
	t.Parallel()
	a := newAPIWorld(t, "deposed-leader")
	lease := a.leaderLease("leader-"+a.name, "replica-a")
	first := v1alpha1.TermOf(lease).String()
	lease = a.takeOver(lease, "replica-b")
	m := a.apiMachine(t.TempDir())

	a.grantInTerm("os-2", "g-paused", first) // replica A resumes and writes
	if got := settle(t, m); got != v1alpha1.StepYielded {
		t.Fatalf("grant of the deposed leader: step %s, want Yielded", got)
	}
	if node := a.get(); node.Spec.Unschedulable {
		t.Fatal("the deposed leader's grant cordoned the node")
	}
	if reason := m.State().Reason; !strings.Contains(reason, "deposed leader") || !strings.Contains(reason, "term 0") {
		t.Fatalf("reason %q: want it to name the deposed leader's term", reason)
	}

	// The new leader releases the yielded grant, then grants in its term.
	a.coordinator(map[string]*string{v1alpha1.AnnotationGrant: nil, v1alpha1.AnnotationGrantTarget: nil, v1alpha1.AnnotationGrantTerm: nil})
	if got := settle(t, m); got != v1alpha1.StepStaged {
		t.Fatalf("after the release: step %s, want Staged", got)
	}
	a.grantInTerm("os-2", "g-current", v1alpha1.TermOf(lease).String())
	if got := settle(t, m); got != v1alpha1.StepRebooting || !a.get().Spec.Unschedulable {
		t.Fatalf("grant of the current term: step %s, cordoned %t; want Rebooting, cordoned", got, a.get().Spec.Unschedulable)
	}
}

// A grant whose term names a Lease that is gone, or that cannot be parsed,
// is yielded without a cordon.
func TestGrantTermThatCannotBeConfirmedIsNotTaken(t *testing.T) {
	t.Parallel()
	a := newAPIWorld(t, "unconfirmed-term")
	gone := v1alpha1.LeaderTerm{Lease: "default/no-such-lease", UID: "u", Transitions: 3, Holder: "replica-a"}
	for _, tc := range []struct{ term, reason string }{
		{gone.String(), "no longer exists"},
		{`{"lease":"default","uid":"u","transitions":1,"holder":"h"}`, v1alpha1.AnnotationGrantTerm},
	} {
		m := a.apiMachine(t.TempDir())
		a.grantInTerm("os-2", "g-"+tc.reason[:4], tc.term)
		if got := settle(t, m); got != v1alpha1.StepYielded || a.get().Spec.Unschedulable {
			t.Fatalf("term %s: step %s, cordoned %t; want Yielded, not cordoned", tc.term, got, a.get().Spec.Unschedulable)
		}
		if reason := m.State().Reason; !strings.Contains(reason, tc.reason) {
			t.Fatalf("term %s: reason %q, want it to say %q", tc.term, reason, tc.reason)
		}
	}
}
