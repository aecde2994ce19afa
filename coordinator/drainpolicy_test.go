package coordinator_test

import (
	"context"
	"testing"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/utils/ptr"

	"github.com/nodeward/nodeward/api/v1alpha1"
	"github.com/nodeward/nodeward/test/cluster"
)

// A pool switched from onTimeout Force to Retry while its node drains
// under a grant: the coordinator rewrites the node's drain policy, and
// only it (the target and the grant stay), so the agent does not force the
// drain on the policy the grant was written with.
func TestDrainPolicyChangeReachesTheNodeInFlight(t *testing.T) {
	t.Parallel()
	cp, dyn := setup(t)
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	const pool = "policy-switch"
	node := cp.CreateNodes(t, cluster.NodeSpec{Prefix: pool, Count: 1})[0]
	renewLeases(t, cp, []string{node})
	createPool(t, dyn, pool, &v1alpha1.UpdatePool{ObjectMeta: metav1.ObjectMeta{Name: pool},
		Spec: v1alpha1.UpdatePoolSpec{NodeSelector: &metav1.LabelSelector{MatchLabels: map[string]string{cluster.GroupLabel: pool}},
			OSImage: "os:2", MaxUnavailable: ptr.To(intstrInt(1)),
			Drain: &v1alpha1.DrainSpec{Timeout: "1m", OnTimeout: "Force"}}})
	runCoordinator(ctx, t, cp, dyn, pool)

	// The agent stages the target, takes the grant and drains (blocked).
	waitAnnotation(t, cp, node, v1alpha1.AnnotationTarget, "os:2", 30*time.Second)
	if err := patchAnnotations(ctx, cp, node, map[string]any{v1alpha1.AnnotationState: string(v1alpha1.StepStaged),
		v1alpha1.AnnotationStateTarget: "os:2", v1alpha1.AnnotationStaged: "os:2"}); err != nil {
		t.Fatal(err)
	}
	var grant string
	cluster.WaitFor(t, 30*time.Second, "grant on "+node, func(ctx context.Context) (bool, error) {
		grant = getNode(ctx, t, cp, node).Annotations[v1alpha1.AnnotationGrant]
		return grant != "", nil
	})
	if f := getNode(ctx, t, cp, node).Annotations[v1alpha1.AnnotationForceOnDrainTimeout]; f != "true" {
		t.Fatalf("granted with force-on-drain-timeout %q, want true", f)
	}
	if err := patchAnnotations(ctx, cp, node, map[string]any{v1alpha1.AnnotationState: string(v1alpha1.StepDraining),
		v1alpha1.AnnotationStateGrant: grant}); err != nil {
		t.Fatal(err)
	}

	patchPool(ctx, t, dyn, pool, map[string]any{"drain": map[string]any{"timeout": "5m", "onTimeout": "Retry"}})
	waitAnnotation(t, cp, node, v1alpha1.AnnotationForceOnDrainTimeout, "", 30*time.Second)
	a := getNode(ctx, t, cp, node).Annotations
	if a[v1alpha1.AnnotationDrainTimeout] != "5m" || a[v1alpha1.AnnotationGrant] != grant || a[v1alpha1.AnnotationTarget] != "os:2" {
		t.Fatalf("after the switch: drain-timeout %q grant %q target %q; want 5m, the grant %s and target os:2 kept",
			a[v1alpha1.AnnotationDrainTimeout], a[v1alpha1.AnnotationGrant], a[v1alpha1.AnnotationTarget], grant)
	}
}
