package coordinator_test

import (
	"context"
	"strings"
	"testing"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/utils/ptr"

	"github.com/nodeward/nodeward/api/v1alpha1"
	"github.com/nodeward/nodeward/test/cluster"
)

// orderLabel groups the nodes of one case of TestOrderPicksTheFirstGrant:
// their names come from three prefixes, so cluster.GroupLabel cannot.
const orderLabel = "nodeward.test/order"

// TestOrderPicksTheFirstGrant: on the real API server, a pool with
// spec.order NewestFirst grants its newest node first, one with OldestFirst
// or no order its oldest. The three nodes are created a second apart
// (creationTimestamp keeps whole seconds), already staged so that all are
// candidates from the first pass, and named so that neither answer is the
// first by name.
func TestOrderPicksTheFirstGrant(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		group string
		order v1alpha1.UpdateOrder
		want  int // index in creation order
	}{
		{"order-unset", "", 0},
		{"order-oldest", v1alpha1.OldestFirst, 0},
		{"order-newest", v1alpha1.NewestFirst, 2},
	} {
		t.Run(tc.group, func(t *testing.T) {
			t.Parallel()
			cp, dyn := setup(t)
			const image = "os:or1"
			// Oldest to newest: c, a, b; by name a comes first.
			nodes := agedNodes(t, cp, tc.group, image, "c", "a", "b")
			renewLeases(t, cp, nodes)
			ctx, cancel := context.WithCancel(context.Background())
			t.Cleanup(cancel)
			agents := scriptAgents(ctx, t, cp, orderLabel+"="+tc.group)
			createPool(t, dyn, tc.group, &v1alpha1.UpdatePool{ObjectMeta: metav1.ObjectMeta{Name: tc.group}, Spec: v1alpha1.UpdatePoolSpec{
				NodeSelector: &metav1.LabelSelector{MatchLabels: map[string]string{orderLabel: tc.group}},
				OSImage:      image, MaxUnavailable: ptr.To(intstrInt(1)), Order: tc.order,
			}})
			runCoordinator(ctx, t, cp, dyn, tc.group)
			if g := agents.next(t, time.Minute); g.node != nodes[tc.want] {
				t.Errorf("order %q over %v (oldest first): %s granted first, want %s", tc.order, nodes, g.node, nodes[tc.want])
			}
		})
	}
}

// agedNodes creates one node per suffix, a second apart in that order,
// labelled orderLabel=group and already staged on image (so that no
// staging race decides which is a candidate first), and returns their
// names oldest first.
func agedNodes(t *testing.T, cp *cluster.ControlPlane, group, image string, suffixes ...string) []string {
	t.Helper()
	staged := map[string]string{v1alpha1.AnnotationTarget: image, v1alpha1.AnnotationStaged: image,
		v1alpha1.AnnotationState: string(v1alpha1.StepStaged), v1alpha1.AnnotationStateTarget: image}
	var names []string
	for _, s := range suffixes {
		if len(names) > 0 {
			afterCreationSecond(t, cp, names[len(names)-1])
		}
		names = append(names, cp.CreateNodes(t, cluster.NodeSpec{Prefix: group + "-" + s, Count: 1,
			Labels: map[string]string{orderLabel: group}, Annotations: staged})...)
	}
	return names
}

// afterCreationSecond waits until the second node was created in has
// passed, so that a node created next is younger by its creationTimestamp.
func afterCreationSecond(t *testing.T, cp *cluster.ControlPlane, node string) {
	t.Helper()
	n, err := cp.Client().CoreV1().Nodes().Get(context.Background(), node, metav1.GetOptions{})
	if err != nil {
		t.Fatalf("get node %s: %v", node, err)
	}
	next := n.CreationTimestamp.Add(time.Second)
	cluster.WaitFor(t, 5*time.Second, "the second after "+node+"'s creation", func(context.Context) (bool, error) {
		return !time.Now().Before(next), nil
	})
}

// TestUnknownOrderIsRefused: the API server refuses an order the CRD does
// not list, and its message names the field and the value; nothing is
// stored.
func TestUnknownOrderIsRefused(t *testing.T) {
	t.Parallel()
	_, dyn := setup(t)
	const name = "order-sideways"
	obj := &unstructured.Unstructured{Object: map[string]any{"apiVersion": v1alpha1.GroupName + "/" + v1alpha1.Version,
		"kind": "UpdatePool", "metadata": map[string]any{"name": name}, "spec": map[string]any{
			"nodeSelector": map[string]any{"matchLabels": map[string]any{"x": "y"}}, "osImage": "os:v1", "order": "Sideways"}}}
	_, err := dyn.Resource(v1alpha1.UpdatePoolResource()).Create(context.Background(), obj, metav1.CreateOptions{})
	if err == nil {
		_ = dyn.Resource(v1alpha1.UpdatePoolResource()).Delete(context.Background(), name, metav1.DeleteOptions{})
		t.Fatal("order Sideways: accepted")
	}
	for _, want := range []string{"spec.order", `"Sideways"`, "OldestFirst", "NewestFirst"} {
		if !strings.Contains(err.Error(), want) {
			t.Errorf("error %q does not say %s", err, want)
		}
	}
	if _, err := dyn.Resource(v1alpha1.UpdatePoolResource()).Get(context.Background(), name, metav1.GetOptions{}); err == nil {
		t.Errorf("pool %s stored after the refusal", name)
	}
}
