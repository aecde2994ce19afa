package update

import (
	"slices"
	"testing"

	v1alpha1 "github.com/nodeward/nodeward/api/v1alpha1"
)

func TestStepNoticesHaveOneRowPerStep(t *testing.T) {
	if err := v1alpha1.StepTableMismatch(stepNotices); err != nil {
		t.Error(err)
	}
}

// The comparisons the table replaced in Machine.announce and
// Machine.publish, written out: each step must read the same from it.
func TestStepNoticesKeepTheFormerSteps(t *testing.T) {
	oldWarning := []v1alpha1.Step{v1alpha1.StepDegraded, v1alpha1.StepRolledBack, v1alpha1.StepRollingBack,
		v1alpha1.StepYielding}
	oldReasonInStatus := []v1alpha1.Step{v1alpha1.StepDegraded, v1alpha1.StepYielded, v1alpha1.StepRolledBack}
	for _, s := range v1alpha1.AllSteps() {
		n := stepNotices[s]
		if want := slices.Contains(oldWarning, s) || s == v1alpha1.StepYielded; n.reasonInEvent != want {
			t.Errorf("%s: reasonInEvent %v, was %v", s, n.reasonInEvent, want)
		}
		if want := slices.Contains(oldReasonInStatus, s); n.reasonInStatus != want {
			t.Errorf("%s: reasonInStatus %v, was %v", s, n.reasonInStatus, want)
		}
	}
}
