package coordinator

import (
	"reflect"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/intstr"

	"github.com/nodeward/nodeward/api/v1alpha1"
)

// TestViewCacheRebuildsWhatChanged: the cached view is always the view
// viewNode builds: after a change of the node (a new resourceVersion), of
// its agent's liveness and of the pool's target; a node missing from a pass
// is forgotten, and so is a deleted pool.
func TestViewCacheRebuildsWhatChanged(t *testing.T) {
	node := &corev1.Node{ObjectMeta: metav1.ObjectMeta{Name: "n1", ResourceVersion: "1",
		Annotations: map[string]string{v1alpha1.AnnotationState: string(v1alpha1.StepStaged)}},
		Status: corev1.NodeStatus{Conditions: []corev1.NodeCondition{{Type: corev1.NodeReady, Status: corev1.ConditionTrue}}}}
	cache := newViewCache()
	check := func(what string, n *corev1.Node, leaseOK bool, target string) {
		t.Helper()
		pass := cache.pass("p")
		got := pass.view(pass.node(n), n, leaseOK, target)
		pass.done(append(pass.buf(), got))
		if want := viewNode(n, leaseOK, target); !reflect.DeepEqual(got, want) {
			t.Errorf("%s: cached view\n%+v\nwant\n%+v", what, got, want)
		}
	}
	check("first pass", node, true, "os:2")
	check("unchanged", node, true, "os:2")
	changed := node.DeepCopy()
	changed.ResourceVersion = "2"
	changed.Annotations[v1alpha1.AnnotationState] = string(v1alpha1.StepDraining)
	changed.Annotations[v1alpha1.AnnotationGrant] = "g1"
	check("annotations changed", changed, true, "os:2")
	check("agent went silent", changed, false, "os:2")
	check("pool target changed", changed, false, "os:3")
	cordoned := changed.DeepCopy()
	cordoned.ResourceVersion = "3"
	cordoned.Spec.Unschedulable = true
	check("cordoned", cordoned, false, "os:3")

	pass := cache.pass("p") // a pass that does not see n1
	pass.done(pass.buf())
	if _, ok := cache.pools["p"].nodes["n1"]; ok {
		t.Errorf("a node no pass saw is still cached")
	}
	cache.forget("p")
	if _, ok := cache.pools["p"]; ok {
		t.Errorf("a deleted pool's views are still cached")
	}
}

// TestViewCacheSelectionsFollowNodesAndPools: a pass through the cache
// gives the input a pass without it gives (buildInput), after every change
// a selection depends on: a node's labels and grant-pool annotation (each
// with a new resourceVersion), a pool's selector and target, the planned
// pool's canary selector, a pool added and one deleted.
func TestViewCacheSelectionsFollowNodesAndPools(t *testing.T) {
	t.Parallel()
	mk := func(name, group string, extra map[string]string) *corev1.Node {
		labels := map[string]string{"group": group}
		for k, v := range extra {
			labels[k] = v
		}
		return &corev1.Node{ObjectMeta: metav1.ObjectMeta{Name: name, ResourceVersion: "1", Labels: labels,
			Annotations: map[string]string{v1alpha1.AnnotationState: string(v1alpha1.StepDone)}},
			Status: corev1.NodeStatus{Conditions: []corev1.NodeCondition{{Type: corev1.NodeReady, Status: corev1.ConditionTrue}}}}
	}
	nodes := []*corev1.Node{mk("a1", "a", nil), mk("a2", "a", map[string]string{"canary": "yes"}), mk("b1", "b", nil),
		mk("cp", "a", map[string]string{"node-role.kubernetes.io/control-plane": ""})}
	planned := pool(intstr.FromInt32(1), func(s *v1alpha1.UpdatePoolSpec) {
		s.NodeSelector = &metav1.LabelSelector{MatchLabels: map[string]string{"group": "a"}}
	})
	other := pool(intstr.FromInt32(1), func(s *v1alpha1.UpdatePoolSpec) {
		s.NodeSelector = &metav1.LabelSelector{MatchLabels: map[string]string{"group": "b"}}
		s.OSImage = "quay.io/os:3"
	})
	other.Name = "other"
	pools := []*v1alpha1.UpdatePool{planned, other}
	alive := func(node string) bool { return node != "b1" }
	cache := newViewCache()
	check := func(what string) {
		t.Helper()
		pass := cache.pass(planned.Name)
		got, gotSilent, err := buildInputWith(pass, planned, pools, nodes, alive, map[string]bool{}, map[string]bool{}, time.Time{})
		if err != nil {
			t.Fatalf("%s: %v", what, err)
		}
		pass.done(got.nodes)
		want, wantSilent, _ := buildInput(planned, pools, nodes, alive, map[string]bool{}, map[string]bool{}, time.Time{})
		if !reflect.DeepEqual(got.nodes, want.nodes) || got.controlPlaneBusy != want.controlPlaneBusy || !reflect.DeepEqual(gotSilent, wantSilent) {
			t.Errorf("%s: through the cache\n%+v (%q)\nwithout\n%+v (%q)", what, got.nodes, got.controlPlaneBusy, want.nodes, want.controlPlaneBusy)
		}
	}
	change := func(i int, f func(*corev1.Node)) {
		n := nodes[i].DeepCopy()
		f(n)
		n.ResourceVersion += "1"
		nodes[i] = n
	}
	check("first pass")
	check("nothing changed")
	change(2, func(n *corev1.Node) { n.Labels["group"] = "a" })
	check("b1 relabelled into the planned pool")
	change(0, func(n *corev1.Node) {
		n.Annotations[v1alpha1.AnnotationGrantPool] = "other"
		n.Annotations[v1alpha1.AnnotationGrant] = "g1"
	})
	check("a1 granted by the other pool")
	other = copyPool(other)
	other.Spec.NodeSelector = &metav1.LabelSelector{MatchLabels: map[string]string{"group": "a"}}
	pools = []*v1alpha1.UpdatePool{planned, other}
	check("the other pool's selector now shares group a")
	change(3, func(n *corev1.Node) {
		n.Annotations[v1alpha1.AnnotationState] = string(v1alpha1.StepDegraded)
		n.Annotations[v1alpha1.AnnotationStateTarget] = "quay.io/os:4"
	})
	check("the control-plane node degraded on a target no pool has")
	other = copyPool(other)
	other.Spec.OSImage = "quay.io/os:4"
	pools = []*v1alpha1.UpdatePool{other, planned}
	check("the other pool's target changed to it (and the pools listed in another order)")
	planned = copyPool(planned)
	planned.Spec.Canary = &v1alpha1.Canary{Selector: &metav1.LabelSelector{MatchLabels: map[string]string{"canary": "yes"}}}
	pools = []*v1alpha1.UpdatePool{other, planned}
	check("a canary selector")
	pools = []*v1alpha1.UpdatePool{planned}
	check("the other pool deleted")
	nodes = nodes[1:]
	check("a node deleted")
	if _, ok := cache.pools[planned.Name].nodes["a1"]; ok {
		t.Errorf("a deleted node's selection is still cached")
	}
}

// copyPool is a shallow copy of p, for a test to set fields of its own.
func copyPool(p *v1alpha1.UpdatePool) *v1alpha1.UpdatePool {
	c := *p
	return &c
}
