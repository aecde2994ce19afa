package v1alpha1

import (
	"strings"
	"testing"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
)

func servingNode() *corev1.Node {
	return &corev1.Node{
		ObjectMeta: metav1.ObjectMeta{Name: "n", Annotations: map[string]string{}},
		Status: corev1.NodeStatus{Conditions: []corev1.NodeCondition{
			{Type: corev1.NodeReady, Status: corev1.ConditionTrue},
			{Type: corev1.NodeMemoryPressure, Status: corev1.ConditionFalse},
		}},
	}
}

func TestNotServingCountsReadyAndEveryBlockingCondition(t *testing.T) {
	if why := NotServing(servingNode()); why != "" {
		t.Fatalf("a Ready node without pressure: NotServing = %q, want empty", why)
	}
	n := servingNode()
	n.Status.Conditions[0].Status = corev1.ConditionUnknown
	if why := NotServing(n); why != "not Ready" {
		t.Fatalf("Ready Unknown: NotServing = %q, want \"not Ready\"", why)
	}
	blockers := append([]corev1.NodeConditionType{corev1.NodeDiskPressure, corev1.NodeNetworkUnavailable}, HealthConditions()...)
	for _, c := range blockers {
		n := servingNode()
		n.Status.Conditions = append(n.Status.Conditions, corev1.NodeCondition{Type: c, Status: corev1.ConditionTrue})
		if why := NotServing(n); !strings.Contains(why, string(c)) {
			t.Errorf("%s True: NotServing = %q, want it named", c, why)
		}
	}
	// The kubelet's MemoryPressure and PIDPressure taint the node but leave
	// running pods alone: they do not take it out of service.
	n = servingNode()
	n.Status.Conditions[1].Status = corev1.ConditionTrue
	if why := NotServing(n); why != "" {
		t.Fatalf("kubelet MemoryPressure: NotServing = %q, want empty", why)
	}
}

func TestUnavailable(t *testing.T) {
	alive := NodeAvailability{Target: "os:2", AgentAlive: true}
	for name, tc := range map[string]struct {
		mutate func(*corev1.Node)
		a      NodeAvailability
		want   string // "" available, else a part of the reason
	}{
		"available":             {func(*corev1.Node) {}, alive, ""},
		"granted":               {func(n *corev1.Node) { n.Annotations[AnnotationGrant] = "g" }, alive, "updating"},
		"mid-update, no grant":  {func(n *corev1.Node) { n.Annotations[AnnotationState] = string(StepRebooting) }, alive, "Rebooting"},
		"granted step no grant": {func(n *corev1.Node) { n.Annotations[AnnotationState] = string(StepGranted) }, alive, "Granted"},
		"staged":                {func(n *corev1.Node) { n.Annotations[AnnotationState] = string(StepStaged) }, alive, ""},
		"not ready":             {func(n *corev1.Node) { n.Status.Conditions[0].Status = corev1.ConditionFalse }, alive, "not Ready"},
		"cordoned":              {func(n *corev1.Node) { n.Spec.Unschedulable = true }, alive, "cordoned"},
		"silent agent":          {func(*corev1.Node) {}, NodeAvailability{Target: "os:2"}, "Lease"},
		"degraded on target": {func(n *corev1.Node) {
			n.Annotations[AnnotationState], n.Annotations[AnnotationStateTarget] = string(StepDegraded), "os:2"
		}, alive, "degraded"},
		"degraded on an old target": {func(n *corev1.Node) {
			n.Annotations[AnnotationState], n.Annotations[AnnotationStateTarget] = string(StepDegraded), "os:1"
		}, alive, ""},
	} {
		n := servingNode()
		tc.mutate(n)
		down, why := Unavailable(n, tc.a)
		if down != (tc.want != "") || !strings.Contains(why, tc.want) {
			t.Errorf("%s: Unavailable = %v %q, want %q", name, down, why, tc.want)
		}
	}
}

func TestStepsAreValidAndOnlyDisruptingOnesHoldASlotPastGranted(t *testing.T) {
	for _, s := range AllSteps() {
		if !s.Valid() {
			t.Errorf("%s not Valid", s)
		}
		if s.Disrupting() && !s.HoldsSlot() {
			t.Errorf("%s disrupts but holds no slot", s)
		}
	}
	if Step("Bogus").Valid() {
		t.Error("an unknown step is Valid")
	}
}
