package daemon

import (
	"context"
	"testing"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/nodeward/nodeward/api/v1alpha1"
	"github.com/nodeward/nodeward/test/cluster"
)

func TestGuardAllowsByZoneStatePermitAndControlPlaneHolder(t *testing.T) {
	node := func(name, zone string, cp bool) *corev1.Node {
		n := &corev1.Node{ObjectMeta: metav1.ObjectMeta{Name: name, Labels: map[string]string{"topology.kubernetes.io/zone": zone}}}
		if cp {
			n.Labels["node-role.kubernetes.io/control-plane"] = ""
		}
		return n
	}
	data := map[string]string{
		"zone.a": "Allowed", "zone.b": "Denied", "zone.c": "RateLimited", "zone.c.permits": "c1,c2",
		"controlplane-holder": "cp1",
	}
	for _, tc := range []struct {
		node *corev1.Node
		want bool
	}{
		{node("a1", "a", false), true},
		{node("b1", "b", false), false},
		{node("c1", "c", false), true},
		{node("c3", "c", false), false},
		{node("d1", "d", false), false}, // a zone the guard does not know: refuse
		{node("cp1", "a", true), true},
		{node("cp2", "a", true), false}, // not the holder
	} {
		if got := guardAllows(data, tc.node); got != tc.want {
			t.Errorf("node %s (zone %s): allowed=%v, want %v", tc.node.Name, tc.node.Labels["topology.kubernetes.io/zone"], got, tc.want)
		}
	}
}

// TestCoordinatorGuardReadsThePublishedConfigMap against the API server:
// without a guard NoExecute is refused; with the zone Allowed it is allowed.
func TestCoordinatorGuardReadsThePublishedConfigMap(t *testing.T) {
	cp := env.ControlPlane(t)
	ctx := context.Background()
	nodes := cp.CreateNodes(t, cluster.NodeSpec{Prefix: "guardread", Count: 1, Zones: []string{"guardread-z"}})
	guard := CoordinatorGuard(cp.Kube())
	taint := corev1.Taint{Key: "nodeward.io/memory-pressure", Effect: corev1.TaintEffectNoExecute}
	cms := cp.Client().CoreV1().ConfigMaps(v1alpha1.AgentLeaseNamespace)
	if _, err := cp.Client().CoreV1().Namespaces().Create(ctx, &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: v1alpha1.AgentLeaseNamespace}}, metav1.CreateOptions{}); err != nil && !apierrors.IsAlreadyExists(err) {
		t.Fatal(err)
	}
	_ = cms.Delete(ctx, v1alpha1.GuardConfigMapName, metav1.DeleteOptions{})
	if guard(ctx, nodes[0], taint) {
		t.Fatal("no guard published: NoExecute must be refused")
	}
	if _, err := cms.Create(ctx, &corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{Name: v1alpha1.GuardConfigMapName},
		Data: map[string]string{"zone.guardread-z": "Allowed"}}, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = cms.Delete(context.Background(), v1alpha1.GuardConfigMapName, metav1.DeleteOptions{}) })
	if !guard(ctx, nodes[0], taint) {
		t.Fatal("zone Allowed: NoExecute must be allowed")
	}
}
