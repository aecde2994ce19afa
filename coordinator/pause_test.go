package coordinator_test

import (
	"encoding/json"
	"testing"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/utils/ptr"

	"github.com/nodeward/nodeward/api/v1alpha1"
	"github.com/nodeward/nodeward/coordinator"
)

// TestPauseMidRolloutStopsGrantsAndLetsInFlightFinish: the andon cord. A
// pool paused while one node holds a grant shows the reason in its Paused
// condition, lets that node finish, and grants nothing more until resumed.
func TestPauseMidRolloutStopsGrantsAndLetsInFlightFinish(t *testing.T) {
	t.Parallel()
	const prefix = "andon"
	r := newRig(t, prefix, 3, 1)
	cp, dyn, ctx, agents := r.cp, r.dyn, r.ctx, r.agents
	createPool(t, dyn, prefix, &v1alpha1.UpdatePool{ObjectMeta: metav1.ObjectMeta{Name: prefix}, Spec: v1alpha1.UpdatePoolSpec{
		NodeSelector: groupSelector(prefix), OSImage: "os:an1", MaxUnavailable: ptr.To(intstrInt(1)),
	}})
	runCoordinator(ctx, t, cp, dyn, prefix)
	inFlight := agents.next(t, time.Minute)
	reason := "INC-4711: error rate up since the first node"
	patchPool(ctx, t, dyn, prefix, map[string]any{"paused": true, "pauseReason": reason})
	waitPoolCondition(t, dyn, prefix, v1alpha1.PoolPaused, 30*time.Second, reason)
	agents.mustReport(ctx, t, inFlight, v1alpha1.StepDone)
	waitUpdated(t, cp, dyn, prefix, 1, 30*time.Second)
	// Paused: for several of the coordinator's passes (1 s resync), no grant.
	select {
	case g := <-agents.grants:
		t.Fatalf("%s granted while the pool is paused", g.node)
	case <-time.After(5 * time.Second):
	}
	patchPool(ctx, t, dyn, prefix, map[string]any{"paused": false, "pauseReason": nil})
	waitPoolCondition(t, dyn, prefix, v1alpha1.PoolPaused, 30*time.Second, "new grants allowed")
	for range 2 {
		agents.mustReport(ctx, t, agents.next(t, time.Minute), v1alpha1.StepDone)
	}
	waitUpdated(t, cp, dyn, prefix, 3, 30*time.Second)
}

// TestFailureBudgetHaltsThePoolUntilResumed: with failureBudget 1, the
// first node to fail on the target halts the pool — Halted names it, and
// the slot the other granted node frees is not used — until the failures
// are acknowledged (what nodeward resume writes), and the rollout goes on.
func TestFailureBudgetHaltsThePoolUntilResumed(t *testing.T) {
	t.Parallel()
	const prefix = "budget"
	r := newRig(t, prefix, 4, 2)
	cp, dyn, ctx, agents := r.cp, r.dyn, r.ctx, r.agents
	createPool(t, dyn, prefix, &v1alpha1.UpdatePool{ObjectMeta: metav1.ObjectMeta{Name: prefix}, Spec: v1alpha1.UpdatePoolSpec{
		NodeSelector: groupSelector(prefix), OSImage: "os:bu1", MaxUnavailable: ptr.To(intstrInt(2)), FailureBudget: ptr.To(intstrInt(1)),
	}})
	runCoordinator(ctx, t, cp, dyn, prefix)
	failed, ok := agents.next(t, time.Minute), agents.next(t, time.Minute)
	agents.mustReport(ctx, t, failed, v1alpha1.StepDegraded)
	waitPoolCondition(t, dyn, prefix, v1alpha1.PoolHalted, 30*time.Second, "failure budget of 1 exhausted", failed.node)
	agents.mustReport(ctx, t, ok, v1alpha1.StepDone)
	waitUpdated(t, cp, dyn, prefix, 1, 30*time.Second)
	select {
	case g := <-agents.grants:
		t.Fatalf("%s granted while the failure budget is exhausted", g.node)
	case <-time.After(5 * time.Second):
	}
	// Acknowledge the failure as nodeward resume does.
	obj, err := dyn.Resource(v1alpha1.UpdatePoolResource()).Get(ctx, prefix, metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	var pool v1alpha1.UpdatePool
	if err := runtime.DefaultUnstructuredConverter.FromUnstructured(obj.Object, &pool); err != nil {
		t.Fatal(err)
	}
	if len(pool.Status.FailedNodes) != 1 || pool.Status.FailedNodes[0] != failed.node {
		t.Fatalf("status.failedNodes %v, want [%s]", pool.Status.FailedNodes, failed.node)
	}
	ack, _ := json.Marshal(map[string]any{"metadata": map[string]any{"annotations": map[string]any{
		v1alpha1.AnnotationFailuresAcknowledged: coordinator.FailuresAcknowledgement(&pool)}}})
	if _, err := dyn.Resource(v1alpha1.UpdatePoolResource()).Patch(ctx, prefix, types.MergePatchType, ack, metav1.PatchOptions{}); err != nil {
		t.Fatal(err)
	}
	waitPoolCondition(t, dyn, prefix, v1alpha1.PoolHalted, 30*time.Second, "within the failure budget")
	next := agents.next(t, time.Minute)
	if next.node == failed.node || next.node == ok.node {
		t.Fatalf("after the acknowledgement %s was granted again", next.node)
	}
	agents.mustReport(ctx, t, next, v1alpha1.StepDone)
}
