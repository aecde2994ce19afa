package coordinator_test

import (
	"context"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/utils/ptr"

	"github.com/nodeward/nodeward/api/v1alpha1"
	"github.com/nodeward/nodeward/test/cluster"
)

func groupSelector(g string) *metav1.LabelSelector {
	return &metav1.LabelSelector{MatchLabels: map[string]string{cluster.GroupLabel: g}}
}

// TestFinishedNodeThatDoesNotServeKeepsCounting: a node whose agent
// reports Done while the CNI says NetworkUnavailable, or Yielded because an
// admin cordoned it, is released but still counted: with maxUnavailable 1
// no other node is granted until it serves again.
func TestFinishedNodeThatDoesNotServeKeepsCounting(t *testing.T) {
	t.Parallel()
	const prefix = "finished-down"
	r := newRig(t, prefix, 3, 1)
	cp, dyn, nodes, ctx, agents := r.cp, r.dyn, r.nodes, r.ctx, r.agents
	createPool(t, dyn, prefix, &v1alpha1.UpdatePool{ObjectMeta: metav1.ObjectMeta{Name: prefix}, Spec: v1alpha1.UpdatePoolSpec{
		NodeSelector: groupSelector(prefix), OSImage: "os:fd1", MaxUnavailable: ptr.To(intstrPercent("34%")), // 1 of 3
	}})
	runCoordinator(ctx, t, cp, dyn, prefix)

	// Done, but the node lost its network.
	g := agents.next(t, time.Minute)
	setCondition(ctx, t, cp, g.node, corev1.NodeNetworkUnavailable, corev1.ConditionTrue)
	agents.mustReport(ctx, t, g, v1alpha1.StepDone)
	waitAnnotation(t, cp, g.node, v1alpha1.AnnotationGrant, "", 30*time.Second)
	// Grants are written before the releases of the same pass, and a later
	// status write proves a later pass: neither granted another node.
	noGrantBut(ctx, t, cp, nodes, g.node, "after the release of a Done node without network")
	waitPoolCondition(t, dyn, prefix, v1alpha1.PoolUpdating, 30*time.Second, g.node+" (unhealthy: NetworkUnavailable is True)")
	noGrantBut(ctx, t, cp, nodes, g.node, "while a Done node has no network")
	setCondition(ctx, t, cp, g.node, corev1.NodeNetworkUnavailable, corev1.ConditionFalse)

	// Yielded because an admin cordoned the node.
	g2 := agents.next(t, 30*time.Second)
	if g2.node == g.node {
		t.Fatalf("%s was granted again after it finished", g.node)
	}
	cordon(ctx, t, cp, g2.node, true)
	agents.mustReport(ctx, t, g2, v1alpha1.StepYielded)
	waitAnnotation(t, cp, g2.node, v1alpha1.AnnotationGrant, "", 30*time.Second)
	if getNode(ctx, t, cp, g2.node).Annotations[v1alpha1.AnnotationYieldedAt] == "" {
		t.Errorf("%s yielded but has no yielded-at", g2.node)
	}
	noGrantBut(ctx, t, cp, nodes, g2.node, "after the release of a node that yielded while cordoned")
	waitPoolCondition(t, dyn, prefix, v1alpha1.PoolUpdating, 30*time.Second, g2.node+" (cordoned)")
	noGrantBut(ctx, t, cp, nodes, g2.node, "while a yielded node is cordoned")
	cordon(ctx, t, cp, g2.node, false)

	// The rest of the rollout: the node never granted, then the one that
	// yielded, queued last.
	for i, want := range []string{"", g2.node} {
		rest := agents.next(t, 30*time.Second)
		if (want != "" && rest.node != want) || (want == "" && (rest.node == g.node || rest.node == g2.node)) {
			t.Errorf("grant %d of the rest went to %s", i, rest.node)
		}
		agents.mustReport(ctx, t, rest, v1alpha1.StepDone)
	}
	waitUpdated(t, cp, dyn, prefix, 3, 30*time.Second)
}

// TestOverlappingPoolKeepsCountingAndReleasesTheInFlightNode: a second
// pool that selects a node mid-update frees no slot in the first pool;
// neither grants the node again, and the pool that granted it releases it
// once it is Done.
func TestOverlappingPoolKeepsCountingAndReleasesTheInFlightNode(t *testing.T) {
	t.Parallel()
	cp, dyn := setup(t)
	const prefix, second = "overlap", "overlap-b"
	nodes := cp.CreateNodes(t, cluster.NodeSpec{Prefix: prefix, Count: 2})
	renewLeases(t, cp, nodes)
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	sel := cluster.GroupLabel + "=" + prefix
	watchUnavailable(ctx, t, cp, sel, 1)
	agents := scriptAgents(ctx, t, cp, sel)
	createPool(t, dyn, prefix, &v1alpha1.UpdatePool{ObjectMeta: metav1.ObjectMeta{Name: prefix}, Spec: v1alpha1.UpdatePoolSpec{
		NodeSelector: groupSelector(prefix), OSImage: "os:ov1", MaxUnavailable: ptr.To(intstrPercent("50%")), // 1 of 2
	}})
	runCoordinator(ctx, t, cp, dyn, prefix)
	g := agents.next(t, time.Minute)
	if pool := getNode(ctx, t, cp, g.node).Annotations[v1alpha1.AnnotationGrantPool]; pool != prefix {
		t.Errorf("grant-pool %q, want %q", pool, prefix)
	}

	// A second pool selects the node in flight.
	if _, err := cp.Client().CoreV1().Nodes().Patch(ctx, g.node, types.MergePatchType,
		[]byte(`{"metadata":{"labels":{"nodeward.test/overlap-b":"yes"}}}`), metav1.PatchOptions{}); err != nil {
		t.Fatal(err)
	}
	createPool(t, dyn, prefix, &v1alpha1.UpdatePool{ObjectMeta: metav1.ObjectMeta{Name: second}, Spec: v1alpha1.UpdatePoolSpec{
		NodeSelector: &metav1.LabelSelector{MatchLabels: map[string]string{"nodeward.test/overlap-b": "yes"}},
		OSImage:      "os:ov1", MaxUnavailable: ptr.To(intstrPercent("100%")),
	}})
	waitPoolCondition(t, dyn, prefix, v1alpha1.PoolDegraded, 30*time.Second, "selected by another pool too", g.node)
	waitPoolCondition(t, dyn, prefix, v1alpha1.PoolUpdating, 30*time.Second, g.node+" (updating)")
	waitPoolCondition(t, dyn, second, v1alpha1.PoolUpdating, 30*time.Second, g.node+" (updating)")
	noGrantBut(ctx, t, cp, nodes, g.node, "after a second pool selected the node in flight")

	// Done: the granting pool releases it, and the other node goes next.
	agents.mustReport(ctx, t, g, v1alpha1.StepDone)
	waitAnnotation(t, cp, g.node, v1alpha1.AnnotationGrant, "", 30*time.Second)
	for _, k := range []string{v1alpha1.AnnotationGrantPool, v1alpha1.AnnotationGrantTarget} {
		if v, ok := getNode(ctx, t, cp, g.node).Annotations[k]; ok {
			t.Errorf("released node %s keeps %s=%q", g.node, k, v)
		}
	}
	g2 := agents.next(t, 30*time.Second)
	if g2.node == g.node {
		t.Fatalf("overlapping node %s was granted again", g.node)
	}
	agents.mustReport(ctx, t, g2, v1alpha1.StepDone)
	waitUpdated(t, cp, dyn, prefix, 1, 30*time.Second) // the node the first pool alone selects
}

// TestGrantedNodeKeepsTheTargetOfItsGrant: a pool's new target is not
// written to a node holding a grant for the old one; Done for the old
// target releases it; a Degraded grant is kept for its own target and
// released when the target changes.
func TestGrantedNodeKeepsTheTargetOfItsGrant(t *testing.T) {
	t.Parallel()
	const prefix = "retarget"
	r := newRig(t, prefix, 2, 1)
	cp, dyn, nodes, ctx, agents := r.cp, r.dyn, r.nodes, r.ctx, r.agents
	createPool(t, dyn, prefix, &v1alpha1.UpdatePool{ObjectMeta: metav1.ObjectMeta{Name: prefix}, Spec: v1alpha1.UpdatePoolSpec{
		NodeSelector: groupSelector(prefix), OSImage: "os:rt1", MaxUnavailable: ptr.To(intstrPercent("50%")),
	}})
	runCoordinator(ctx, t, cp, dyn, prefix)
	g := agents.next(t, time.Minute)
	if g.target != "os:rt1" {
		t.Errorf("grant-target %q, want os:rt1", g.target)
	}
	other := nodes[0]
	if other == g.node {
		other = nodes[1]
	}
	patchPool(ctx, t, dyn, prefix, map[string]any{"osImage": "os:rt2"})
	waitAnnotation(t, cp, other, v1alpha1.AnnotationTarget, "os:rt2", 30*time.Second)
	n := getNode(ctx, t, cp, g.node)
	if a := n.Annotations; a[v1alpha1.AnnotationTarget] != "os:rt1" || a[v1alpha1.AnnotationGrant] != g.grant ||
		a[v1alpha1.AnnotationGrantTarget] != "os:rt1" {
		t.Errorf("granted node %s: target=%q grant=%q grant-target=%q; want os:rt1, %s, os:rt1", g.node,
			a[v1alpha1.AnnotationTarget], a[v1alpha1.AnnotationGrant], a[v1alpha1.AnnotationGrantTarget], g.grant)
	}
	// Done for the target of its grant: released, then retargeted.
	agents.mustReport(ctx, t, g, v1alpha1.StepDone)
	waitAnnotation(t, cp, g.node, v1alpha1.AnnotationGrant, "", 30*time.Second)
	waitAnnotation(t, cp, g.node, v1alpha1.AnnotationTarget, "os:rt2", 30*time.Second)

	// Degraded on the pool's target keeps the grant...
	g2 := agents.next(t, 30*time.Second)
	if g2.target != "os:rt2" {
		t.Errorf("grant-target %q, want os:rt2", g2.target)
	}
	agents.mustReport(ctx, t, g2, v1alpha1.StepDegraded)
	waitPoolCondition(t, dyn, prefix, v1alpha1.PoolDegraded, 30*time.Second, "failed on the target: "+g2.node)
	if got := getNode(ctx, t, cp, g2.node).Annotations[v1alpha1.AnnotationGrant]; got != g2.grant {
		t.Fatalf("Degraded node %s lost its grant for the pool's target: %q", g2.node, got)
	}
	// ...until the target changes: then it is released and retargeted.
	patchPool(ctx, t, dyn, prefix, map[string]any{"osImage": "os:rt3"})
	waitAnnotation(t, cp, g2.node, v1alpha1.AnnotationGrant, "", 30*time.Second)
	waitAnnotation(t, cp, g2.node, v1alpha1.AnnotationTarget, "os:rt3", 30*time.Second)
}

// TestDrainPolicyRemovedFromThePoolLeavesNoStaleKey: every target and grant
// write carries the whole drain policy; keys the pool no longer sets are
// deleted, so an old onTimeout: Force does not survive.
func TestDrainPolicyRemovedFromThePoolLeavesNoStaleKey(t *testing.T) {
	t.Parallel()
	cp, dyn := setup(t)
	const prefix = "drainkeys"
	nodes := cp.CreateNodes(t, cluster.NodeSpec{Prefix: prefix, Count: 2})
	renewLeases(t, cp, nodes)
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	agents := scriptAgents(ctx, t, cp, cluster.GroupLabel+"="+prefix)
	createPool(t, dyn, prefix, &v1alpha1.UpdatePool{ObjectMeta: metav1.ObjectMeta{Name: prefix}, Spec: v1alpha1.UpdatePoolSpec{
		NodeSelector: groupSelector(prefix), OSImage: "os:dk1", Paused: true,
		Drain: &v1alpha1.DrainSpec{Timeout: "5m", OnTimeout: "Force"},
	}})
	runCoordinator(ctx, t, cp, dyn, prefix)
	drainKeys := func(node string) map[string]string {
		a := getNode(ctx, t, cp, node).Annotations
		out := map[string]string{}
		for _, k := range []string{v1alpha1.AnnotationDrainTimeout, v1alpha1.AnnotationYieldOnDrainTimeout, v1alpha1.AnnotationForceOnDrainTimeout} {
			if v, ok := a[k]; ok {
				out[k] = v
			}
		}
		return out
	}
	for _, n := range nodes {
		waitAnnotation(t, cp, n, v1alpha1.AnnotationTarget, "os:dk1", 30*time.Second)
		if got := drainKeys(n); got[v1alpha1.AnnotationForceOnDrainTimeout] != "true" || got[v1alpha1.AnnotationDrainTimeout] != "5m" ||
			len(got) != 2 {
			t.Errorf("node %s with onTimeout Force: drain keys %v", n, got)
		}
	}
	// The drain policy removed with a new target: the target writes delete it.
	patchPool(ctx, t, dyn, prefix, map[string]any{"drain": nil, "osImage": "os:dk2"})
	for _, n := range nodes {
		waitAnnotation(t, cp, n, v1alpha1.AnnotationTarget, "os:dk2", 30*time.Second)
		if got := drainKeys(n); len(got) != 0 {
			t.Errorf("node %s after spec.drain was removed: drain keys %v, want none", n, got)
		}
	}
	// The grant write carries the policy of the moment.
	patchPool(ctx, t, dyn, prefix, map[string]any{"drain": map[string]any{"onTimeout": "Yield"}, "paused": false})
	g := agents.next(t, 30*time.Second)
	if got := drainKeys(g.node); len(got) != 1 || got[v1alpha1.AnnotationYieldOnDrainTimeout] != "true" {
		t.Errorf("granted node %s with onTimeout Yield: drain keys %v", g.node, got)
	}
}
