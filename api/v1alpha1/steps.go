package v1alpha1

// stepRow holds what the protocol says about one step. Each attribute is a
// column here rather than a switch at each place that asks, so that adding
// a step or moving one across a boundary (the cordon, the slot) is one line
// that every reader sees. A step without a row (not a Step) has every
// attribute false.
type stepRow struct {
	// disrupting: the node is (or may be) disrupted by its update, from
	// the cordon until the uncordon.
	disrupting bool
	// holdsSlot: the node holds a slot of its pool. Every disrupting step
	// does, and so do the steps between the grant and the cordon.
	holdsSlot bool
}

// stepRows has one row per step of AllSteps and is never written.
var stepRows = map[Step]stepRow{
	StepIdle:           {},
	StepStaging:        {},
	StepStaged:         {},
	StepGranted:        {holdsSlot: true},
	StepHooksPreDrain:  {holdsSlot: true},
	StepCordoning:      {disrupting: true, holdsSlot: true},
	StepDraining:       {disrupting: true, holdsSlot: true},
	StepHooksPreReboot: {disrupting: true, holdsSlot: true},
	StepFinalizing:     {disrupting: true, holdsSlot: true},
	StepRebooting:      {disrupting: true, holdsSlot: true},
	StepVerifying:      {disrupting: true, holdsSlot: true},
	StepWaitingHealthy: {disrupting: true, holdsSlot: true},
	StepUncordoning:    {disrupting: true, holdsSlot: true},
	StepDone:           {},

	StepYielding:    {disrupting: true, holdsSlot: true},
	StepYielded:     {},
	StepRollingBack: {disrupting: true, holdsSlot: true},
	StepRolledBack:  {disrupting: true, holdsSlot: true},
	StepDegraded:    {disrupting: true, holdsSlot: true},
}

// row is s's row, the zero row for an unknown step.
func (s Step) row() stepRow { return stepRows[s] }

// Disrupting reports whether a node in step s is (or may be) disrupted by
// its update: from the cordon until the uncordon.
func (s Step) Disrupting() bool { return s.row().disrupting }

// HoldsSlot reports whether a node in step s holds a slot of its pool.
func (s Step) HoldsSlot() bool { return s.row().holdsSlot }
