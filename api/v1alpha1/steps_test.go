package v1alpha1

import (
	"slices"
	"strings"
	"testing"
)

// The step table and AllSteps name the same steps: a step added to one and
// not the other would have no attributes, or no metric and no validity.
func TestStepTableHasOneRowPerStep(t *testing.T) {
	steps := AllSteps()
	for i, s := range steps {
		if slices.Contains(steps[:i], s) {
			t.Errorf("AllSteps lists %s twice", s)
		}
	}
	if err := StepTableMismatch(stepRows); err != nil {
		t.Error(err)
	}
	if err := StepTableMismatch(map[Step]bool{StepIdle: true, "Bogus": true}); err == nil ||
		!strings.Contains(err.Error(), `"Bogus"`) || !strings.Contains(err.Error(), "Staging") {
		t.Errorf("a table with a missing and an unknown step: %v, want both named", err)
	}
}

func TestUnknownStepHasNoAttributes(t *testing.T) {
	for _, s := range []Step{"", "Bogus", "draining"} {
		if _, ok := stepRows[s]; ok {
			t.Errorf("the step table has a row for unknown step %q", s)
		}
		for _, a := range stepAttributes() {
			if a.of(s) {
				t.Errorf("unknown step %q is %s", s, a.name)
			}
		}
	}
}

// stepAttribute is one method the table answers, with the steps it answered
// true for when it was a switch (or a comparison) at its one call site.
// Keeping the old lists here makes a changed row fail a test that says what
// changed, rather than pass silently.
type stepAttribute struct {
	name  string
	of    func(Step) bool
	steps []Step
}

func stepAttributes() []stepAttribute {
	disrupting := []Step{StepCordoning, StepDraining, StepHooksPreReboot, StepFinalizing, StepRebooting, StepVerifying,
		StepWaitingHealthy, StepUncordoning, StepYielding, StepRollingBack, StepRolledBack, StepDegraded}
	return []stepAttribute{
		// Step.Disrupting's switch (api/v1alpha1/protocol.go).
		{"Disrupting", Step.Disrupting, disrupting},
		// Step.HoldsSlot: Granted, HooksPreDrain or Disrupting.
		{"HoldsSlot", Step.HoldsSlot, append([]Step{StepGranted, StepHooksPreDrain}, disrupting...)},
		// ReportAnnotations' switch for AnnotationStaged
		// (daemon/update/protocol.go).
		{"ReportsStaged", Step.ReportsStaged, []Step{StepStaged, StepGranted, StepHooksPreDrain, StepCordoning,
			StepDraining, StepHooksPreReboot, StepFinalizing, StepYielding, StepYielded}},
		// Machine.stepContext's switch (daemon/update/machine.go).
		{"Critical", Step.Critical, []Step{StepFinalizing, StepRollingBack}},
		// Machine.announce's comparisons for the Event's type
		// (daemon/update/machine.go).
		{"Warning", Step.Warning, []Step{StepDegraded, StepRolledBack, StepRollingBack, StepYielding}},
		// The coordinator's drainStep switch (coordinator/waiting.go).
		{"DrainPhase", Step.DrainPhase, []Step{StepGranted, StepHooksPreDrain, StepCordoning, StepDraining}},
		// The coordinator's nodeView.finished (coordinator/nodes.go).
		{"Finished", Step.Finished, []Step{StepDone, StepYielded}},
		// The coordinator's nodeView.updated (coordinator/nodes.go).
		{"Settled", Step.Settled, []Step{StepDone, StepIdle}},
	}
}

func TestStepAttributesKeepTheirFormerSteps(t *testing.T) {
	for _, a := range stepAttributes() {
		for _, s := range AllSteps() {
			if got, want := a.of(s), slices.Contains(a.steps, s); got != want {
				t.Errorf("%s.%s() = %v, was %v", s, a.name, got, want)
			}
		}
	}
}
