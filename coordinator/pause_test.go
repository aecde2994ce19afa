package coordinator_test

import (
	"testing"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/utils/ptr"

	"github.com/nodeward/nodeward/api/v1alpha1"
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
