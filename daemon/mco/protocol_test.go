package mco

import (
	"context"
	"strings"
	"testing"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	v1alpha1 "github.com/nodeward/nodeward/api/v1alpha1"
	"github.com/nodeward/nodeward/daemon/update"
)

// TestStateIsWorkingFromTheGrantAndDegradedSticksUntilDone follows an
// update that fails, is retried for a new config and succeeds: the MCD's
// states in the same order (Working from the first step after the grant,
// Degraded through the rollback and the retries, Done only at the end).
func TestStateIsWorkingFromTheGrantAndDegradedSticksUntilDone(t *testing.T) {
	p := &Protocol{Node: "n1", loaded: true}
	steps := []struct {
		st   update.State
		want string
	}{
		{update.State{Step: v1alpha1.StepIdle}, StateDone},
		{update.State{Step: v1alpha1.StepStaging, Target: "rendered-2"}, StateWorking},
		{update.State{Step: v1alpha1.StepDraining, Target: "rendered-2"}, StateWorking},
		{update.State{Step: v1alpha1.StepVerifying, Target: "rendered-2"}, StateWorking},
		{update.State{Step: v1alpha1.StepRollingBack, Target: "rendered-2", RollingBack: true, Reason: "bad boot"}, StateDegraded},
		{update.State{Step: v1alpha1.StepRebooting, Target: "rendered-2", RollingBack: true}, StateDegraded},
		{update.State{Step: v1alpha1.StepVerifying, Target: "rendered-2"}, StateDegraded},
		{update.State{Step: v1alpha1.StepRolledBack, Target: "rendered-2", Reason: "rolled back"}, StateDegraded},
		{update.State{Step: v1alpha1.StepDegraded, Target: "rendered-2", Reason: "rolled back"}, StateDegraded},
		// A new desired config: the retries stay Degraded, as the MCD's.
		{update.State{Step: v1alpha1.StepStaging, Target: "rendered-3"}, StateDegraded},
		{update.State{Step: v1alpha1.StepDone, Target: "rendered-3"}, StateDone},
		{update.State{Step: v1alpha1.StepStaging, Target: "rendered-4"}, StateWorking},
		{update.State{Step: v1alpha1.StepDegraded, Target: "rendered-4", Refused: true, Reason: "kernelType"}, StateUnreconcilable},
		{update.State{Step: v1alpha1.StepStaging, Target: "rendered-5"}, StateUnreconcilable},
	}
	for i, s := range steps {
		if got, _ := p.stateFor(s.st); got != s.want {
			t.Fatalf("step %d (%s %s): state %s, want %s", i, s.st.Step, s.st.Target, got, s.want)
		}
		if s.want == StateDone {
			p.setFailing("", "")
		}
	}
}

func TestReasonIsCutAtTheMCDsLimit(t *testing.T) {
	long := strings.Repeat("é", 2500)
	if got := []rune(bound(long)); len(got) != 2000 {
		t.Fatalf("bound kept %d characters, want 2000", len(got))
	}
	if bound("short") != "short" {
		t.Fatal("a short reason was changed")
	}
}

// TestConditionsFollowThePhases: Updated is True only at Done, NodeDegraded
// True with the reason when failing, every type always present.
func TestConditionsFollowThePhases(t *testing.T) {
	find := func(cs []metav1.Condition, typ string) metav1.Condition {
		for _, c := range cs {
			if c.Type == typ {
				return c
			}
		}
		t.Fatalf("condition %s missing", typ)
		return metav1.Condition{}
	}
	done := conditionsFor("n1", update.State{Step: v1alpha1.StepDone}, StateDone, "", "rendered-2", false)
	if len(done) != len(conditionTypes) || find(done, CondUpdated).Status != metav1.ConditionTrue {
		t.Fatalf("Done: %d conditions, Updated %s", len(done), find(done, CondUpdated).Status)
	}
	rebooting := conditionsFor("n1", update.State{Step: v1alpha1.StepRebooting, Cordoned: true}, StateWorking, "", "rendered-2", true)
	if find(rebooting, CondUpdated).Status != metav1.ConditionFalse || find(rebooting, CondAppliedFilesAndOS).Status != metav1.ConditionTrue ||
		find(rebooting, CondRebootedNode).Status != metav1.ConditionUnknown || find(rebooting, CondDrained).Status != metav1.ConditionTrue {
		t.Fatalf("Rebooting: %+v", rebooting)
	}
	failed := conditionsFor("n1", update.State{Step: v1alpha1.StepDegraded}, StateUnreconcilable, "kernelType changed", "rendered-2", false)
	nd := find(failed, CondNodeDegraded)
	if nd.Status != metav1.ConditionTrue || !strings.Contains(nd.Message, "kernelType changed") ||
		find(failed, CondUpdatePrepared).Status != metav1.ConditionUnknown {
		t.Fatalf("Unreconcilable: NodeDegraded %+v", nd)
	}
}

// TestDesiredReadsTheGrantTheLayeredImageAndTheTopology: desiredConfig
// different from currentConfig is the grant; a layered pool's desiredImage
// is part of the target (and a new image alone is a grant); SingleReplica
// skips the drain.
func TestDesiredReadsTheGrantTheLayeredImageAndTheTopology(t *testing.T) {
	p := &Protocol{Node: "n1"}
	for _, tc := range []struct {
		name        string
		annotations map[string]string
		want        update.Desired
	}{
		{"no desired config", map[string]string{}, update.Desired{}},
		{"settled", map[string]string{AnnotationCurrentConfig: "r1", AnnotationDesiredConfig: "r1"},
			update.Desired{Target: "r1", GrantTarget: "r1"}},
		{"granted", map[string]string{AnnotationCurrentConfig: "r1", AnnotationDesiredConfig: "r2"},
			update.Desired{Target: "r2", GrantTarget: "r2", Grant: "r2"}},
		{"new layered image", map[string]string{AnnotationCurrentConfig: "r1", AnnotationDesiredConfig: "r1",
			AnnotationCurrentImage: "quay.io/x/os@sha256:aa", AnnotationDesiredImage: "quay.io/x/os@sha256:bb"},
			update.Desired{Target: "r1 quay.io/x/os@sha256:bb", GrantTarget: "r1 quay.io/x/os@sha256:bb", Grant: "r1 quay.io/x/os@sha256:bb"}},
		{"single node", map[string]string{AnnotationCurrentConfig: "r1", AnnotationDesiredConfig: "r2", AnnotationTopology: TopologySingleReplica},
			update.Desired{Target: "r2", GrantTarget: "r2", Grant: "r2", SkipDrain: true}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			got, err := p.Desired(context.Background(), &corev1.Node{ObjectMeta: metav1.ObjectMeta{Annotations: tc.annotations}})
			if err != nil || got != tc.want {
				t.Fatalf("Desired = %+v, %v; want %+v", got, err, tc.want)
			}
		})
	}
}
