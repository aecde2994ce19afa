package coordinator

import (
	"fmt"
	"testing"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/nodeward/nodeward/api/v1alpha1"
)

func guardNode(name, zone string, healthy, controlPlane bool, taints ...corev1.Taint) *corev1.Node {
	ready := corev1.ConditionTrue
	if !healthy {
		ready = corev1.ConditionFalse
	}
	labels := map[string]string{zoneLabel: zone}
	if controlPlane {
		labels[controlPlaneRoleLabel] = ""
	}
	return &corev1.Node{
		ObjectMeta: metav1.ObjectMeta{Name: name, Labels: labels},
		Spec:       corev1.NodeSpec{Taints: taints},
		Status:     corev1.NodeStatus{Conditions: []corev1.NodeCondition{{Type: corev1.NodeReady, Status: ready}}},
	}
}

func zoneOf(n int, zone string, bad int) []*corev1.Node {
	var out []*corev1.Node
	for i := range n {
		out = append(out, guardNode(fmt.Sprintf("%s-%02d", zone, i), zone, i >= bad, false))
	}
	return out
}

func TestGuardStopsNoExecuteInDisruptedZonesOfSmallClusters(t *testing.T) {
	nodes := append(zoneOf(10, "a", 5), zoneOf(10, "b", 6)...) // 50% and 60% unhealthy
	g := computeNoExecuteGuard(nodes, nil, true)
	if got := g.data["zone.a"]; got != v1alpha1.GuardAllowed {
		t.Errorf("zone a, 50%% unhealthy: %q, want Allowed", got)
	}
	if got := g.data["zone.b"]; got != v1alpha1.GuardDenied {
		t.Errorf("zone b, 60%% unhealthy in a 20-node cluster: %q, want Denied", got)
	}
}

func TestGuardRateLimitsLargeClustersOneNodePerInterval(t *testing.T) {
	nodes := append(zoneOf(40, "a", 0), zoneOf(20, "b", 12)...) // 60 nodes; b 60% unhealthy
	g := computeNoExecuteGuard(nodes, nil, true)
	if g.data["zone.b"] != v1alpha1.GuardRateLimited || g.data["zone.b.permits"] != "b-00" {
		t.Fatalf("first interval: %q permits %q, want RateLimited with b-00", g.data["zone.b"], g.data["zone.b.permits"])
	}
	g = computeNoExecuteGuard(nodes, g.data, false)
	if g.data["zone.b.permits"] != "b-00" {
		t.Fatalf("within the interval the permits must not grow: %q", g.data["zone.b.permits"])
	}
	g = computeNoExecuteGuard(nodes, g.data, true)
	if g.data["zone.b.permits"] != "b-00,b-01" {
		t.Fatalf("next interval: %q, want b-00,b-01", g.data["zone.b.permits"])
	}
	if g.data["zone.a"] != v1alpha1.GuardAllowed {
		t.Fatalf("healthy zone a: %q", g.data["zone.a"])
	}
}

func TestGuardAllowsOneControlPlaneNodeAtMost(t *testing.T) {
	taint := corev1.Taint{Key: "nodeward.io/memory-pressure", Effect: corev1.TaintEffectNoExecute}
	nodes := []*corev1.Node{
		guardNode("cp-a", "z", false, true),
		guardNode("cp-b", "z", false, true, taint), // already holds a NoExecute taint: keeps the right
		guardNode("cp-c", "z", true, true),
	}
	if got := computeNoExecuteGuard(nodes, nil, true).data[v1alpha1.GuardControlPlaneHolder]; got != "cp-b" {
		t.Fatalf("holder %q, want cp-b (already tainted)", got)
	}
	nodes[1] = guardNode("cp-b", "z", false, true)
	if got := computeNoExecuteGuard(nodes, nil, true).data[v1alpha1.GuardControlPlaneHolder]; got != "cp-a" {
		t.Fatalf("holder %q, want cp-a (first unhealthy)", got)
	}
}
