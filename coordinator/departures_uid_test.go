package coordinator

import (
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	k8stypes "k8s.io/apimachinery/pkg/types"

	"github.com/nodeward/nodeward/api/v1alpha1"
)

// A departed machine is back only when ANOTHER Node object of its name
// serves: while the coordinator's watch is down its index may still hold
// the departed object itself, serving, and that is not the machine back.
func TestDepartureEndsOnlyWithAnotherObjectServing(t *testing.T) {
	ready := []corev1.NodeCondition{{Type: corev1.NodeReady, Status: corev1.ConditionTrue}}
	node := func(uid string, conds []corev1.NodeCondition) *corev1.Node {
		return &corev1.Node{ObjectMeta: metav1.ObjectMeta{Name: "n1", UID: k8stypes.UID("uid-" + uid),
			Annotations: map[string]string{v1alpha1.AnnotationGrant: "g1", v1alpha1.AnnotationState: string(v1alpha1.StepRebooting)}},
			Status: corev1.NodeStatus{Conditions: conds}}
	}
	// registered is a new Node as its kubelet registers it, before the
	// machine's agent reports on it.
	registered := func(uid string, conds []corev1.NodeCondition) *corev1.Node {
		return &corev1.Node{ObjectMeta: metav1.ObjectMeta{Name: "n1", UID: k8stypes.UID("uid-" + uid)},
			Status: corev1.NodeStatus{Conditions: conds}}
	}
	d := newDepartures()
	d.record(node("old", ready), "", time.Unix(0, 0))
	d.returned(node("old", ready)) // the stale copy of the departed object
	if _, ok := d.all()["n1"]; !ok {
		t.Fatal("the departed object itself, serving, ended its departure")
	}
	d.returned(registered("new", nil)) // registered again, not Ready yet
	if _, ok := d.all()["n1"]; !ok {
		t.Fatal("a new Node that does not serve ended the departure")
	}
	d.returned(registered("new", ready)) // Ready, its agent not started yet
	if _, ok := d.all()["n1"]; !ok {
		t.Fatal("a new Node serving before the machine's agent reported on it ended the departure")
	}
	d.returned(node("new", ready))
	if _, ok := d.all()["n1"]; ok {
		t.Fatal("a new Node of the name serving, its agent's report on it, did not end the departure")
	}
	// An entry persisted before UIDs were recorded: any Node of the name
	// that serves.
	if !MachineBack("", node("old", ready)) || MachineBack("uid-old", node("old", ready)) {
		t.Fatal("MachineBack: want any serving object for an unknown UID, another one for a known UID")
	}
}
