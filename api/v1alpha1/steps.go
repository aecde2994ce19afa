package v1alpha1

import (
	"fmt"
	"slices"
	"strconv"
	"strings"
)

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
	// reportsStaged: the target is staged on the node and the agent
	// reports it in AnnotationStaged. From Rebooting on it is finalized,
	// booted or rolled back: no longer merely staged.
	reportsStaged bool
	// critical: the step rewrites which deployment boots; cut in half it
	// could leave no consistent deployment to boot, so the agent finishes
	// it even while shutting down.
	critical bool
	// warning: entering the step means the update failed or is backing
	// out; it deserves an operator's attention (a Warning event).
	warning bool
	// drainPhase: the step belongs to the drain — the grant, the
	// pre-drain hooks, the cordon, the evictions — before anything on the
	// host changed.
	drainPhase bool
	// finished: the agent is through with the grant it reports the step
	// for; the grant is only bookkeeping until it is released.
	finished bool
	// settled: the agent has nothing left to do for the target it
	// reports: the target is booted and the node is back.
	settled bool
}

// stepRows has one row per step of AllSteps and is never written.
var stepRows = map[Step]stepRow{
	StepIdle:           {settled: true},
	StepStaging:        {},
	StepStaged:         {reportsStaged: true},
	StepGranted:        {holdsSlot: true, reportsStaged: true, drainPhase: true},
	StepHooksPreDrain:  {holdsSlot: true, reportsStaged: true, drainPhase: true},
	StepCordoning:      {disrupting: true, holdsSlot: true, reportsStaged: true, drainPhase: true},
	StepDraining:       {disrupting: true, holdsSlot: true, reportsStaged: true, drainPhase: true},
	StepHooksPreReboot: {disrupting: true, holdsSlot: true, reportsStaged: true},
	StepFinalizing:     {disrupting: true, holdsSlot: true, reportsStaged: true, critical: true},
	StepRebooting:      {disrupting: true, holdsSlot: true},
	StepVerifying:      {disrupting: true, holdsSlot: true},
	StepWaitingHealthy: {disrupting: true, holdsSlot: true},
	StepUncordoning:    {disrupting: true, holdsSlot: true},
	StepDone:           {finished: true, settled: true},

	StepYielding:    {disrupting: true, holdsSlot: true, reportsStaged: true, warning: true},
	StepYielded:     {reportsStaged: true, finished: true},
	StepRollingBack: {disrupting: true, holdsSlot: true, critical: true, warning: true},
	StepRolledBack:  {disrupting: true, holdsSlot: true, warning: true},
	StepDegraded:    {disrupting: true, holdsSlot: true, warning: true},
}

// row is s's row, the zero row for an unknown step.
func (s Step) row() stepRow { return stepRows[s] }

// Disrupting reports whether a node in step s is (or may be) disrupted by
// its update: from the cordon until the uncordon.
func (s Step) Disrupting() bool { return s.row().disrupting }

// HoldsSlot reports whether a node in step s holds a slot of its pool.
func (s Step) HoldsSlot() bool { return s.row().holdsSlot }

// ReportsStaged reports whether the agent in step s has the target staged
// and reports it as such (AnnotationStaged).
func (s Step) ReportsStaged() bool { return s.row().reportsStaged }

// Critical reports whether the action of step s must run to its end once
// started, through the agent's shutdown: it changes the boot deployment.
func (s Step) Critical() bool { return s.row().critical }

// Warning reports whether entering step s means the update failed or is
// backing out, which the agent tells as a Warning event.
func (s Step) Warning() bool { return s.row().warning }

// DrainPhase reports whether step s is one of the drain's: granted, its
// pre-drain hooks, the cordon or the evictions.
func (s Step) DrainPhase() bool { return s.row().drainPhase }

// Finished reports whether an agent in step s is through with the grant it
// reports the step for (Done or Yielded): its part is over.
func (s Step) Finished() bool { return s.row().finished }

// Settled reports whether an agent in step s has nothing left to do for
// the target it reports (Idle or Done).
func (s Step) Settled() bool { return s.row().settled }

// StepTableMismatch reports how a table keyed by Step differs from
// AllSteps: the steps it lacks a row for and the rows it has for no step
// (nil when it has exactly one row per step). Every package that keeps
// per-step attributes in a table of its own pins it with this in a test.
func StepTableMismatch[Row any](rows map[Step]Row) error {
	var missing, unknown []string
	for _, s := range AllSteps() {
		if _, ok := rows[s]; !ok {
			missing = append(missing, string(s))
		}
	}
	for s := range rows {
		if !s.Valid() {
			unknown = append(unknown, strconv.Quote(string(s)))
		}
	}
	if len(missing)+len(unknown) == 0 {
		return nil
	}
	slices.Sort(unknown)
	return fmt.Errorf("step table: no row for [%s]; rows for unknown steps [%s]",
		strings.Join(missing, ", "), strings.Join(unknown, ", "))
}
