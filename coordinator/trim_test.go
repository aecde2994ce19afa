package coordinator

import (
	"reflect"
	"testing"
	"time"

	coordinationv1 "k8s.io/api/coordination/v1"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/utils/ptr"
)

// TestTrimKeepsWhatThePlanReads: the trimmed Node still gives the same
// view as the whole one (labels, annotations, taints, unschedulable,
// conditions), the trimmed Lease the same liveness; what is dropped is
// gone, and trimming twice changes nothing more (client-go asks for an
// idempotent transform).
func TestTrimKeepsWhatThePlanReads(t *testing.T) {
	t.Parallel()
	node := func() *corev1.Node {
		return &corev1.Node{
			ObjectMeta: metav1.ObjectMeta{Name: "n", ResourceVersion: "7", Labels: map[string]string{"pool": "a"},
				Annotations:   map[string]string{"nodeward.io/state": "Done"},
				ManagedFields: []metav1.ManagedFieldsEntry{{Manager: "kubelet"}}},
			Spec: corev1.NodeSpec{Unschedulable: true, Taints: []corev1.Taint{{Key: "k", Effect: corev1.TaintEffectNoSchedule}}},
			Status: corev1.NodeStatus{Conditions: []corev1.NodeCondition{{Type: corev1.NodeReady, Status: corev1.ConditionTrue}},
				Images: []corev1.ContainerImage{{Names: []string{"quay.io/app:1"}, SizeBytes: 1 << 20}}},
		}
	}
	whole := node()
	obj, err := trimNode(node())
	if err != nil {
		t.Fatal(err)
	}
	trimmed := obj.(*corev1.Node)
	if trimmed.ManagedFields != nil || trimmed.Status.Images != nil {
		t.Errorf("kept managed fields %v, images %v", trimmed.ManagedFields, trimmed.Status.Images)
	}
	for _, target := range []string{"quay.io/os:1", "quay.io/os:2"} {
		if got, want := viewNode(trimmed, true, target, ""), viewNode(whole, true, target, ""); !reflect.DeepEqual(got, want) {
			t.Errorf("view of the trimmed node for %s:\n%+v\nwant\n%+v", target, got, want)
		}
	}
	if !reflect.DeepEqual(trimmed.Labels, whole.Labels) || !reflect.DeepEqual(trimmed.Spec, whole.Spec) ||
		!reflect.DeepEqual(trimmed.Status.Conditions, whole.Status.Conditions) {
		t.Errorf("trimmed node lost what the coordinator reads: %+v", trimmed)
	}
	again, _ := trimNode(trimmed)
	if !reflect.DeepEqual(again, trimmed) {
		t.Error("trimming a trimmed node changed it")
	}

	now := time.Now()
	for _, renewed := range []time.Time{now.Add(-10 * time.Second), now.Add(-time.Hour)} {
		lease := &coordinationv1.Lease{
			ObjectMeta: metav1.ObjectMeta{Name: "nodeward-agent-n", Namespace: "nodeward-system", ResourceVersion: "9",
				ManagedFields: []metav1.ManagedFieldsEntry{{Manager: "agent"}}},
			Spec: coordinationv1.LeaseSpec{HolderIdentity: ptr.To("n"), RenewTime: &metav1.MicroTime{Time: renewed},
				LeaseDurationSeconds: ptr.To[int32](40)},
		}
		obj, err := trimLease(lease)
		if err != nil {
			t.Fatal(err)
		}
		small := obj.(*coordinationv1.Lease)
		if leaseAlive(small, now) != leaseAlive(lease, now) {
			t.Errorf("renewed %v ago: trimmed lease alive %v, whole %v", now.Sub(renewed), leaseAlive(small, now), leaseAlive(lease, now))
		}
		if small.Name != lease.Name || small.Namespace != lease.Namespace || small.ResourceVersion != "9" ||
			small.ManagedFields != nil || small.Spec.HolderIdentity != nil {
			t.Errorf("trimmed lease %+v", small)
		}
		if again, _ := trimLease(small); !reflect.DeepEqual(again, small) {
			t.Error("trimming a trimmed lease changed it")
		}
	}
	// Anything else (a deletion's tombstone) passes through untouched.
	if got, _ := trimLease("tombstone"); got != "tombstone" {
		t.Errorf("trimLease(tombstone) = %v", got)
	}
}
