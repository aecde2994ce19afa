package coordinator

import (
	"testing"
	"time"

	coordinationv1 "k8s.io/api/coordination/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/utils/ptr"
)

func TestOnlyALivenessChangeOfALeaseReplans(t *testing.T) {
	at := time.Date(2026, 11, 24, 12, 0, 0, 0, time.UTC)
	lease := func(renewed time.Time) *coordinationv1.Lease {
		return &coordinationv1.Lease{Spec: coordinationv1.LeaseSpec{LeaseDurationSeconds: ptr.To[int32](240),
			RenewTime: &metav1.MicroTime{Time: renewed}}}
	}
	for _, tc := range []struct {
		what     string
		old, cur *coordinationv1.Lease
		want     bool
	}{
		{"a live Lease renewed", lease(at.Add(-80 * time.Second)), lease(at), false},
		{"an expired Lease renewed: the agent is back", lease(at.Add(-time.Hour)), lease(at), true},
		{"a Lease never renewed, renewed", &coordinationv1.Lease{}, lease(at), true},
		{"a live Lease's renew time removed", lease(at), &coordinationv1.Lease{}, true},
		{"a live Lease shortened to expiry", lease(at.Add(-80 * time.Second)),
			&coordinationv1.Lease{Spec: coordinationv1.LeaseSpec{LeaseDurationSeconds: ptr.To[int32](10), RenewTime: &metav1.MicroTime{Time: at.Add(-80 * time.Second)}}}, true},
	} {
		if got := leaseLivenessChange(tc.old, tc.cur, at); got != tc.want {
			t.Errorf("%s: re-plan %v, want %v", tc.what, got, tc.want)
		}
	}
}

func TestOnlyAPlanChangeOfAPoolReplans(t *testing.T) {
	base := func() *unstructured.Unstructured {
		u := &unstructured.Unstructured{Object: map[string]any{"apiVersion": "nodeward.io/v1alpha1", "kind": "UpdatePool",
			"status": map[string]any{"machineCount": int64(3)}}}
		u.SetName("p")
		u.SetUID("u1")
		u.SetGeneration(4)
		u.SetLabels(map[string]string{"tier": "a"})
		u.SetAnnotations(map[string]string{"x": "1"})
		return u
	}
	for _, tc := range []struct {
		what   string
		change func(u *unstructured.Unstructured)
		want   bool
	}{
		{"status written", func(u *unstructured.Unstructured) { u.Object["status"] = map[string]any{"machineCount": int64(4)} }, false},
		{"resourceVersion only", func(u *unstructured.Unstructured) { u.SetResourceVersion("99") }, false},
		{"spec edited", func(u *unstructured.Unstructured) { u.SetGeneration(5) }, true},
		{"relabelled", func(u *unstructured.Unstructured) { u.SetLabels(map[string]string{"tier": "b"}) }, true},
		{"halted or acknowledged", func(u *unstructured.Unstructured) { u.SetAnnotations(map[string]string{"x": "1", "y": "2"}) }, true},
		{"being deleted", func(u *unstructured.Unstructured) { u.SetDeletionTimestamp(&metav1.Time{Time: time.Now()}) }, true},
		{"recreated", func(u *unstructured.Unstructured) { u.SetUID("u2") }, true},
	} {
		cur := base()
		tc.change(cur)
		if got := poolPlanChange(base(), cur); got != tc.want {
			t.Errorf("%s: re-plan %v, want %v", tc.what, got, tc.want)
		}
	}
}
