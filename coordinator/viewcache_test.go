package coordinator

import (
	"reflect"
	"testing"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

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
		view, buf, done := cache.pass("p")
		got := view(n, leaseOK, target)
		done(append(buf, got))
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

	_, buf, done := cache.pass("p") // a pass that does not see n1
	done(buf)
	if _, ok := cache.pools["p"].nodes["n1"]; ok {
		t.Errorf("a node no pass saw is still cached")
	}
	cache.forget("p")
	if _, ok := cache.pools["p"]; ok {
		t.Errorf("a deleted pool's views are still cached")
	}
}
