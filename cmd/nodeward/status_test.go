package main

import (
	"bytes"
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/nodeward/nodeward/api/v1alpha1"
)

func TestStatusTablesReadLikeOcGetMcp(t *testing.T) {
	var out bytes.Buffer
	pool := v1alpha1.UpdatePool{ObjectMeta: metav1.ObjectMeta{Name: "worker"}, Status: v1alpha1.UpdatePoolStatus{
		ConfigName: "nodeward-abc", MachineCount: 3, ReadyMachineCount: 2, UpdatedMachineCount: 1,
		Conditions: []metav1.Condition{{Type: v1alpha1.PoolUpdating, Status: metav1.ConditionTrue}},
	}}
	printPools(&out, []v1alpha1.UpdatePool{pool})
	now := time.Date(2026, 11, 22, 12, 0, 0, 0, time.UTC)
	printNodes(&out, []corev1.Node{{
		ObjectMeta: metav1.ObjectMeta{Name: "w1", Annotations: map[string]string{
			v1alpha1.AnnotationState: "Draining", v1alpha1.AnnotationGrant: "g1",
			v1alpha1.AnnotationUnavailableSince: now.Add(-90 * time.Second).Format(time.RFC3339Nano),
			v1alpha1.AnnotationReason:           "pod a/b blocked by PDB a/pdb",
		}},
		Spec: corev1.NodeSpec{Unschedulable: true},
	}}, now)
	got := out.String()
	for _, want := range []string{"MACHINECOUNT", "READYMACHINECOUNT", "UPDATEDMACHINECOUNT", "worker", "nodeward-abc",
		"Unknown", "True", "w1", "Draining", "1m30s", "blocked by PDB a/pdb"} {
		if !strings.Contains(got, want) {
			t.Errorf("status output lacks %q:\n%s", want, got)
		}
	}
}
