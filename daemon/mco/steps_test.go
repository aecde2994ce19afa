package mco

import (
	"slices"
	"testing"

	v1alpha1 "github.com/nodeward/nodeward/api/v1alpha1"
	"github.com/nodeward/nodeward/daemon/update"
)

func TestMCDStepTableHasOneRowPerStep(t *testing.T) {
	if err := v1alpha1.StepTableMismatch(mcdSteps); err != nil {
		t.Error(err)
	}
	if got, want := mcdStepOf("Bogus"), (mcdStep{state: StateWorking, progress: notStarted}); got != want {
		t.Errorf("an unknown step reads as %+v, want %+v", got, want)
	}
}

// The switches the table replaced, written out: progressOf's, stateFor's
// comparisons and the condition writers' (conditions.go). Each step must
// read the same from the table.
func TestMCDStepTableKeepsTheFormerMapping(t *testing.T) {
	oldProgress := map[progress][]v1alpha1.Step{
		complete:  {v1alpha1.StepIdle, v1alpha1.StepDone},
		preparing: {v1alpha1.StepStaging},
		prepared: {v1alpha1.StepStaged, v1alpha1.StepGranted, v1alpha1.StepHooksPreDrain, v1alpha1.StepYielding,
			v1alpha1.StepYielded},
		executing: {v1alpha1.StepCordoning, v1alpha1.StepDraining, v1alpha1.StepHooksPreReboot, v1alpha1.StepFinalizing},
		applied:   {v1alpha1.StepRebooting},
		rebooted:  {v1alpha1.StepVerifying},
		resumed:   {v1alpha1.StepWaitingHealthy, v1alpha1.StepUncordoning},
	}
	oldDegraded := []v1alpha1.Step{v1alpha1.StepDegraded, v1alpha1.StepRollingBack, v1alpha1.StepRolledBack}
	oldDone := []v1alpha1.Step{v1alpha1.StepDone, v1alpha1.StepIdle}
	for _, s := range v1alpha1.AllSteps() {
		row := mcdStepOf(s)

		wantProgress := notStarted
		for p, steps := range oldProgress {
			if slices.Contains(steps, s) {
				wantProgress = p
			}
		}
		if row.progress != wantProgress {
			t.Errorf("%s: progress %d, was %d", s, row.progress, wantProgress)
		}

		wantState := StateWorking
		switch {
		case slices.Contains(oldDegraded, s):
			wantState = StateDegraded
		case slices.Contains(oldDone, s):
			wantState = StateDone
		}
		if row.state != wantState {
			t.Errorf("%s: state %s, was %s", s, row.state, wantState)
		}

		// setOwnDrain runs from the executing phase on; before it the
		// drain column is not read, and must say the drain has not begun.
		wantDrain := drainNotStarted
		switch s {
		case v1alpha1.StepDraining:
			wantDrain = drainUnderway
		case v1alpha1.StepHooksPreReboot, v1alpha1.StepFinalizing:
			wantDrain = drainDone
		}
		if row.drain != wantDrain {
			t.Errorf("%s: drain %d, was %d", s, row.drain, wantDrain)
		}

		if want := s == v1alpha1.StepFinalizing; row.applyingOS != want {
			t.Errorf("%s: applyingOS %v, was %v", s, row.applyingOS, want)
		}
	}
}

// stateFor reads its states from the table, over every step: a refusal
// wins over any step, and a failure sticks over every step but those the
// MCD reports Done.
func TestStateForOverEveryStep(t *testing.T) {
	for _, s := range v1alpha1.AllSteps() {
		p := &Protocol{}
		if got, _ := p.stateFor(update.State{Step: s, Refused: true}); got != StateUnreconcilable {
			t.Errorf("%s refused: %s, want %s", s, got, StateUnreconcilable)
		}
		fresh, failed := &Protocol{}, &Protocol{}
		failed.setFailing(StateDegraded, "earlier")
		wantFresh, wantFailed := mcdStepOf(s).state, StateDegraded
		if wantFresh == StateDone {
			wantFailed = StateDone
		}
		if got, _ := fresh.stateFor(update.State{Step: s}); got != wantFresh {
			t.Errorf("%s: %s, want %s", s, got, wantFresh)
		}
		if got, _ := failed.stateFor(update.State{Step: s}); got != wantFailed {
			t.Errorf("%s after a failure: %s, want %s", s, got, wantFailed)
		}
	}
}
