package health

import (
	"testing"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
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
