package coordinator

import (
	"testing"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/intstr"

	"github.com/nodeward/nodeward/api/v1alpha1"
)

// grantsOf are the nodes Decide grants in pool p over nodes and machines.
func grantsOf(t *testing.T, p *v1alpha1.UpdatePool, nodes fleet, machines []MachineState) []string {
	t.Helper()
	snap := Snapshot{Pools: []*v1alpha1.UpdatePool{p}, Nodes: nodes, Machines: machines, Now: now,
		AgentAlive: func(string) bool { return true }}
	writes, err := Decide(p.Name, snap, func(_ *v1alpha1.UpdatePool, node, _ string) string { return "g-" + node })
	if err != nil {
		t.Fatal(err)
	}
	var out []string
	for _, w := range writes {
		if w.Grant != "" {
			out = append(out, w.Node)
		}
	}
	return out
}

// TestSnapshotMachinesCountAsTheControllersDo: a Snapshot's Machine being
// deleted or failed takes its node out of the pool's budget, and a
// control-plane Machine provisioning holds every control-plane grant.
func TestSnapshotMachinesCountAsTheControllersDo(t *testing.T) {
	p := pool(intstr.FromInt32(1), func(s *v1alpha1.UpdatePoolSpec) { s.NodeSelector = &metav1.LabelSelector{} })
	nodes := healthy(2)
	if got := grantsOf(t, p, nodes, nil); len(got) != 1 {
		t.Fatalf("no Machines: grants %v, want one", got)
	}
	for _, m := range []MachineState{{Name: "m0", Node: "n00", Deleting: true}, {Name: "m0", Node: "n00", Failed: true},
		{Name: "m0", Node: "n00", Remediating: true}} {
		if got := grantsOf(t, p, nodes, []MachineState{m, {Name: "m1", Node: "n01"}}); len(got) != 0 {
			t.Errorf("Machine %+v: grants %v, want none (its node fills the budget of 1)", m, got)
		}
	}
	cp := pool(intstr.FromInt32(1), func(s *v1alpha1.UpdatePoolSpec) {
		s.NodeSelector, s.ControlPlane = &metav1.LabelSelector{}, true
	})
	for _, n := range nodes {
		n.Labels["node-role.kubernetes.io/control-plane"] = ""
	}
	provisioning := []MachineState{{Name: "m0", Node: "n00", ControlPlane: true}, {Name: "m1", Node: "n01", ControlPlane: true},
		{Name: "m2", ControlPlane: true}}
	if got := grantsOf(t, cp, nodes, provisioning); len(got) != 0 {
		t.Errorf("a control-plane Machine provisions: grants %v, want none", got)
	}
	if got := grantsOf(t, cp, nodes, provisioning[:2]); len(got) != 1 {
		t.Errorf("control-plane Machines all serve: grants %v, want one", got)
	}
}

// TestMachineHookDecisions: the hook is held on the one Machine of the
// node, refused when it is being deleted, and ends with the node's grant
// and slot (a Degraded node's too).
func TestMachineHookDecisions(t *testing.T) {
	machines := []MachineState{{Name: "m0", Node: "n0"}, {Name: "m1", Node: "n1", Deleting: true},
		{Name: "m2a", Node: "n2"}, {Name: "m2b", Node: "n2"}}
	if m, ok, err := MachineToHold(machines, "n0"); !ok || err != nil || m.Name != "m0" {
		t.Errorf("n0: %+v %v %v, want m0", m, ok, err)
	}
	if _, ok, err := MachineToHold(machines, "n1"); !ok || err == nil {
		t.Errorf("n1, its Machine being deleted: %v %v, want an error", ok, err)
	}
	for _, node := range []string{"n2", "n3"} {
		if _, ok, err := MachineToHold(machines, node); ok || err != nil {
			t.Errorf("%s: %v %v, want no Machine to hold", node, ok, err)
		}
	}
	node := func(kv ...string) *corev1.Node {
		n := &corev1.Node{ObjectMeta: metav1.ObjectMeta{Name: "n0", Annotations: map[string]string{}}}
		for i := 0; i+1 < len(kv); i += 2 {
			n.Annotations[kv[i]] = kv[i+1]
		}
		return n
	}
	m := MachineState{Name: "m0", Node: "n0", Hooked: true}
	for _, c := range []struct {
		name    string
		pending bool
		node    *corev1.Node
		ended   bool
	}{
		{"grant pending", true, node(), false},
		{"granted", false, node(v1alpha1.AnnotationGrant, "g"), false},
		{"draining", false, node(v1alpha1.AnnotationState, string(v1alpha1.StepDraining)), false},
		{"degraded", false, node(v1alpha1.AnnotationGrant, "g", v1alpha1.AnnotationState, string(v1alpha1.StepDegraded)), true},
		{"done and released", false, node(v1alpha1.AnnotationState, string(v1alpha1.StepDone)), true},
		{"node gone", false, nil, true},
	} {
		if got := HookEnded(m, c.pending, c.node); got != c.ended {
			t.Errorf("%s: HookEnded %v, want %v", c.name, got, c.ended)
		}
	}
}
