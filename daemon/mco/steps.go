package mco

import v1alpha1 "github.com/nodeward/nodeward/api/v1alpha1"

// mcdStep is what a machine-config-daemon would show at one step of
// nodeward's update: the node state annotation and how far the
// MachineConfigNode's conditions have got. The step table below is the
// whole translation from nodeward's steps to the MCO's view, so that the
// two cannot drift apart in different switches.
type mcdStep struct {
	// state is the MCD state reported for the step, before a refused
	// config (Unreconcilable) and a sticky failure override it.
	state string
	// progress is how far the MCD's update phases have got.
	progress progress
	// drain is where the drain's own conditions stand, written when
	// nodeward drains; the steps after the drain leave it drainDone
	// through their progress.
	drain drainProgress
	// applyingOS: the step writes the files and the OS (AppliedFilesAndOS
	// is Unknown while it runs).
	applyingOS bool
}

// drainProgress is how far the drain got within the executing phase.
type drainProgress int

const (
	drainNotStarted drainProgress = iota
	drainUnderway                 // evicting pods
	drainDone                     // pods evicted, the update goes on
)

// mcdSteps has one row per step of v1alpha1.AllSteps and is never written.
// The failed steps have not started any MCD phase: NodeDegraded tells them.
var mcdSteps = map[v1alpha1.Step]mcdStep{
	v1alpha1.StepIdle:           {state: StateDone, progress: complete},
	v1alpha1.StepStaging:        {state: StateWorking, progress: preparing},
	v1alpha1.StepStaged:         {state: StateWorking, progress: prepared},
	v1alpha1.StepGranted:        {state: StateWorking, progress: prepared},
	v1alpha1.StepHooksPreDrain:  {state: StateWorking, progress: prepared},
	v1alpha1.StepCordoning:      {state: StateWorking, progress: executing},
	v1alpha1.StepDraining:       {state: StateWorking, progress: executing, drain: drainUnderway},
	v1alpha1.StepHooksPreReboot: {state: StateWorking, progress: executing, drain: drainDone},
	v1alpha1.StepFinalizing:     {state: StateWorking, progress: executing, drain: drainDone, applyingOS: true},
	v1alpha1.StepRebooting:      {state: StateWorking, progress: applied},
	v1alpha1.StepVerifying:      {state: StateWorking, progress: rebooted},
	v1alpha1.StepWaitingHealthy: {state: StateWorking, progress: resumed},
	v1alpha1.StepUncordoning:    {state: StateWorking, progress: resumed},
	v1alpha1.StepDone:           {state: StateDone, progress: complete},

	v1alpha1.StepYielding:    {state: StateWorking, progress: prepared},
	v1alpha1.StepYielded:     {state: StateWorking, progress: prepared},
	v1alpha1.StepRollingBack: {state: StateDegraded, progress: notStarted},
	v1alpha1.StepRolledBack:  {state: StateDegraded, progress: notStarted},
	v1alpha1.StepDegraded:    {state: StateDegraded, progress: notStarted},
}

// mcdStepOf is step's row. The machine loads no unknown step, but a State
// built by hand may carry one: it reads as work in progress that started
// no phase, as the switches this table replaced read it.
func mcdStepOf(step v1alpha1.Step) mcdStep {
	if row, ok := mcdSteps[step]; ok {
		return row
	}
	return mcdStep{state: StateWorking, progress: notStarted}
}
