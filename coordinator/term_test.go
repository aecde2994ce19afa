package coordinator_test

import (
	"context"
	"testing"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/utils/ptr"

	"github.com/nodeward/nodeward/api/v1alpha1"
	"github.com/nodeward/nodeward/coordinator"
	"github.com/nodeward/nodeward/test/cluster"
)

// TestGrantsCarryTheLeaderTerm: a leader-elected coordinator writes, with
// every grant, the term of the leader Lease it holds (the fencing token the
// agent checks before it takes the grant); a new leader's grants carry the
// next term.
func TestGrantsCarryTheLeaderTerm(t *testing.T) {
	t.Parallel()
	cp, dyn := setup(t)
	const prefix = "term"
	nodes := cp.CreateNodes(t, cluster.NodeSpec{Prefix: prefix, Count: 2})
	renewLeases(t, cp, nodes)
	leaderNS := cp.Namespace(t)
	run := func(id string) context.CancelFunc {
		ctx, stop := context.WithCancel(t.Context())
		go func() {
			_ = coordinator.RunWithLeaderElection(ctx, coordinator.Config{Client: cp.Kube(), Dynamic: dyn, Resync: time.Second,
				PoolLabelSelector: suiteLabel + "=" + prefix, DisableGuard: true},
				coordinator.LeaderConfig{Namespace: leaderNS, Identity: id,
					LeaseDuration: 4 * time.Second, RenewDeadline: 3 * time.Second, RetryPeriod: 500 * time.Millisecond})
		}()
		return stop
	}
	// grantTerm waits for node to hold a grant and returns its term.
	grantTerm := func(node string) v1alpha1.LeaderTerm {
		var term v1alpha1.LeaderTerm
		cluster.WaitFor(t, 30*time.Second, node+" granted", func(ctx context.Context) (bool, error) {
			n, err := cp.Kube().Nodes().Get(ctx, node, metav1.GetOptions{})
			if err != nil || n.Annotations[v1alpha1.AnnotationGrant] == "" {
				return false, err
			}
			term, err = v1alpha1.ParseLeaderTerm(n.Annotations[v1alpha1.AnnotationGrantTerm])
			if err != nil {
				t.Fatalf("grant on %s: %v", node, err)
			}
			return true, nil
		})
		return term
	}
	leaseTerm := func() v1alpha1.LeaderTerm {
		l, err := cp.Kube().Leases(leaderNS).Get(t.Context(), coordinator.LeaderLeaseName, metav1.GetOptions{})
		if err != nil {
			t.Fatal(err)
		}
		return v1alpha1.TermOf(l)
	}

	ctx := t.Context()
	agents := scriptAgents(ctx, t, cp, cluster.GroupLabel+"="+prefix)
	stopA := run("a")
	createPool(t, dyn, prefix, &v1alpha1.UpdatePool{ObjectMeta: metav1.ObjectMeta{Name: prefix}, Spec: v1alpha1.UpdatePoolSpec{
		NodeSelector: &metav1.LabelSelector{MatchLabels: map[string]string{cluster.GroupLabel: prefix}},
		OSImage:      "os:2", MaxUnavailable: ptr.To(intstrInt(1)),
	}})
	g := agents.next(t, 30*time.Second)
	first := grantTerm(g.node)
	if want := leaseTerm(); first != want || first.Holder != "a" {
		t.Fatalf("grant of leader a carries term %+v, want the Lease's %+v", first, want)
	}
	stopA() // released on shutdown: b takes over at once
	stopB := run("b")
	defer stopB()
	cluster.WaitFor(t, 20*time.Second, "b to lead", func(context.Context) (bool, error) { return leaseTerm().Holder == "b", nil })
	agents.mustReport(ctx, t, g, v1alpha1.StepDone)
	g = agents.next(t, 30*time.Second)
	second := grantTerm(g.node)
	if want := leaseTerm(); second != want || second.Transitions <= first.Transitions {
		t.Fatalf("grant of leader b carries term %+v, want the Lease's %+v, after a's %d", second, want, first.Transitions)
	}
}
