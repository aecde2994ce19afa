package coordinator

import (
	"iter"
	"reflect"
	"slices"
	"strings"
	"testing"
	"time"

	coordinationv1 "k8s.io/api/coordination/v1"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/intstr"

	"github.com/nodeward/nodeward/api/v1alpha1"
)

// TestViewCacheRebuildsWhatChanged: the cached view is always the view
// viewNode builds: after a change of the node (a new resourceVersion), of
// its agent's liveness and of the pool's target. A deleted pool's slot goes
// to the next new pool.
func TestViewCacheRebuildsWhatChanged(t *testing.T) {
	t.Parallel()
	node := &corev1.Node{ObjectMeta: metav1.ObjectMeta{Name: "n1", ResourceVersion: "1",
		Annotations: map[string]string{v1alpha1.AnnotationState: string(v1alpha1.StepStaged)}},
		Status: corev1.NodeStatus{Conditions: []corev1.NodeCondition{{Type: corev1.NodeReady, Status: corev1.ConditionTrue}}}}
	var e cachedNode
	machine := ""
	check := func(what string, n *corev1.Node, leaseOK bool, target string) {
		t.Helper()
		got := e.viewOf(n, n.ResourceVersion, leaseOK, target, machine)
		if want := viewNode(n, leaseOK, target, machine); !reflect.DeepEqual(got, want) {
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
	machine = "machine openshift-machine-api/m1 is being deleted"
	check("its Machine is being deleted", node, true, "os:3")
	if v := e.viewOf(node, node.ResourceVersion, true, "os:3", machine); v.why != machine {
		t.Errorf("a node whose Machine is being deleted is down for %q, want %q", v.why, machine)
	}

	cache := newViewCache()
	p, q := cache.pass("p").slot, cache.pass("q").slot
	if p == q || cache.pass("p").slot != p {
		t.Errorf("slots p %d, q %d, p again %d: want two, each kept", p, q, cache.pass("p").slot)
	}
	cache.forget("p")
	if _, ok := cache.pools["p"]; ok {
		t.Errorf("a deleted pool is still numbered")
	}
	if r := cache.pass("r").slot; r != p {
		t.Errorf("a new pool got slot %d, want the deleted pool's %d", r, p)
	}
}

// TestViewCacheSelectionsFollowNodesAndPools: a pass through the cache
// and the node index gives the input a pass without them gives
// (buildInput), after every change a selection depends on: a node's labels
// and grant-pool annotation (each with a new resourceVersion), a pool's
// selector and target, the planned pool's canary selector, a pool added
// and one deleted, a node deleted.
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
	now := time.Date(2026, 11, 25, 12, 0, 0, 0, time.UTC)
	index := newNodeIndex()
	for _, n := range nodes {
		index.setNode(n)
		if alive(n.Name) {
			index.setLease(&coordinationv1.Lease{ObjectMeta: metav1.ObjectMeta{Name: v1alpha1.AgentLeaseName(n.Name)},
				Spec: coordinationv1.LeaseSpec{RenewTime: &metav1.MicroTime{Time: now}}})
		}
	}
	cache := newViewCache()
	byName := func(v []nodeView) []nodeView {
		return slices.SortedFunc(slices.Values(v), func(a, b nodeView) int { return strings.Compare(a.name, b.name) })
	}
	check := func(what string) {
		t.Helper()
		views := cache.pass(planned.Name)
		var got planInput
		var gotSilent []*corev1.Node
		var err error
		index.read(views.slot, now, func(listed iter.Seq[listedNode]) {
			got, gotSilent, err = buildInputWith(views, nil, planned, pools, listed, map[string]bool{}, map[string]bool{}, now)
		})
		if err != nil {
			t.Fatalf("%s: %v", what, err)
		}
		views.done(got.nodes)
		want, wantSilent, _ := buildInput(planned, pools, nodes, nil, alive, map[string]bool{}, map[string]bool{}, now)
		if !reflect.DeepEqual(byName(got.nodes), byName(want.nodes)) || got.controlPlaneBusy != want.controlPlaneBusy || !reflect.DeepEqual(gotSilent, wantSilent) {
			t.Errorf("%s: through the cache\n%+v (%q)\nwithout\n%+v (%q)", what, got.nodes, got.controlPlaneBusy, want.nodes, want.controlPlaneBusy)
		}
	}
	change := func(i int, f func(*corev1.Node)) {
		n := nodes[i].DeepCopy()
		f(n)
		n.ResourceVersion += "1"
		nodes[i] = n
		index.setNode(n)
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
	index.removeNode(nodes[0].Name)
	nodes = nodes[1:]
	check("a node deleted")
	index.setNode(mk("a1", "b", nil))
	if e := index.byName["a1"]; e.first.hasSelection || e.first.hasView {
		t.Errorf("a node made again under a deleted node's name inherits its cached selection or view")
	}
}

// copyPool is a shallow copy of p, for a test to set fields of its own.
func copyPool(p *v1alpha1.UpdatePool) *v1alpha1.UpdatePool {
	c := *p
	return &c
}
