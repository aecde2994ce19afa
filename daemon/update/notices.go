package update

import v1alpha1 "github.com/nodeward/nodeward/api/v1alpha1"

// stepNotice is how the agent tells people that it entered a step: the
// Event on the Node (a Warning when Step.Warning) and the status line.
// Only whether they carry the state's reason differs from step to step.
type stepNotice struct {
	// reasonInEvent: the Event of the transition ends with the reason. The
	// Event is recorded once, so it names the reason of every step
	// entered because something went wrong, the ones passed through too.
	reasonInEvent bool
	// reasonInStatus: the status line, which stays while the node rests in
	// the step, ends with the reason; only the steps a node rests in until
	// an operator or a later grant moves it show one.
	reasonInStatus bool
}

// stepNotices has one row per step of v1alpha1.AllSteps and is never
// written.
var stepNotices = map[v1alpha1.Step]stepNotice{
	v1alpha1.StepIdle:           {},
	v1alpha1.StepStaging:        {},
	v1alpha1.StepStaged:         {},
	v1alpha1.StepGranted:        {},
	v1alpha1.StepHooksPreDrain:  {},
	v1alpha1.StepCordoning:      {},
	v1alpha1.StepDraining:       {},
	v1alpha1.StepHooksPreReboot: {},
	v1alpha1.StepFinalizing:     {},
	v1alpha1.StepRebooting:      {},
	v1alpha1.StepVerifying:      {},
	v1alpha1.StepWaitingHealthy: {},
	v1alpha1.StepUncordoning:    {},
	v1alpha1.StepDone:           {},

	v1alpha1.StepYielding:    {reasonInEvent: true},
	v1alpha1.StepYielded:     {reasonInEvent: true, reasonInStatus: true},
	v1alpha1.StepRollingBack: {reasonInEvent: true},
	v1alpha1.StepRolledBack:  {reasonInEvent: true, reasonInStatus: true},
	v1alpha1.StepDegraded:    {reasonInEvent: true, reasonInStatus: true},
}
