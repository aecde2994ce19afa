package coordinator

import "github.com/nodeward/nodeward/api/v1alpha1"

// waitReason is why a pool with nodes left to update makes no progress
// now: a fixed set, the reason label of nodeward_pool_waiting. The
// planner's own words (poolPlan.waiting, the Updating condition's message)
// say more; this is what an alert can select on.
type waitReason string

const (
	waitNone          waitReason = "none"           // nothing to do, or progressing
	waitPaused        waitReason = "paused"         // spec.paused
	waitHalted        waitReason = "halted"         // the failure budget is exhausted, a canary failed, or a gate failed during a soak
	waitGatesFailing  waitReason = "gates_failing"  // a health gate holds new grants
	waitSoaking       waitReason = "soaking"        // staged nodes wait for nodes soaking after Done (or a canary baking)
	waitOutsideWindow waitReason = "outside_window" // no maintenance window open
	waitLimitReached  waitReason = "limit_reached"  // staged nodes wait: maxUnavailable (or the one control-plane node) is used up
	waitStaging       waitReason = "staging"        // no node has staged the target yet
	waitDrainBlocked  waitReason = "drain_blocked"  // a granted node's drain waits on a PDB, an eviction or a hook
	waitDegraded      waitReason = "degraded"       // a node failed on the target and holds its slot
)

// waitReasons lists every waitReason: nodeward_pool_waiting has one series
// per pool and reason.
func waitReasons() []waitReason {
	return []waitReason{waitNone, waitPaused, waitHalted, waitGatesFailing, waitOutsideWindow, waitLimitReached, waitSoaking,
		waitStaging, waitDrainBlocked, waitDegraded}
}

// poolWaits decides the pool's waitReason from the plan: the operator's
// choices (pause, windows) first, then what holds the budget (a blocked
// drain, a degraded node), then the budget itself, then staging.
func poolWaits(in planInput, p *poolPlan, candidates, staging int) waitReason {
	var left, blocked, degraded bool
	for _, n := range in.nodes {
		if !n.managed() || n.updated(p.target) {
			continue
		}
		left = true
		degraded = degraded || n.degraded(p.target)
		blocked = blocked || (n.granted() && !n.finished() && n.drainBlocked && drainStep(n.state))
	}
	if p.target == "" || !left || len(p.grant) > 0 {
		return waitNone
	}
	if in.pool.Spec.Paused {
		return waitPaused
	}
	if p.halted.reason != "" {
		return waitHalted
	}
	if open, err := inWindow(in.pool.Spec.MaintenanceWindows, in.now); err == nil && !open {
		return waitOutsideWindow
	}
	switch {
	case candidates > 0 && in.gates != nil && !in.gates.passing:
		return waitGatesFailing
	case blocked:
		return waitDrainBlocked
	case degraded:
		return waitDegraded
	case candidates > 0 && len(p.soaking)+len(p.soakOver) > 0:
		return waitSoaking
	case candidates > 0:
		return waitLimitReached
	case staging > 0:
		return waitStaging
	}
	return waitNone
}

// drainStep reports whether step is one of the drain's: hooks, cordon,
// evictions.
func drainStep(step v1alpha1.Step) bool {
	switch step {
	case v1alpha1.StepGranted, v1alpha1.StepHooksPreDrain, v1alpha1.StepCordoning, v1alpha1.StepDraining:
		return true
	}
	return false
}

// inFlight lists the nodes updating under pool's grants: granted now, or
// holding a grant the pool issued (or, its issuer unknown, a grant on a
// node it selects) that the agent has not finished.
func inFlight(in planInput, p *poolPlan) []string {
	out := append([]string(nil), p.grant...)
	for _, n := range in.nodes {
		mine := n.owner == in.pool.Name || (n.owner == "" && n.selected)
		if mine && (in.pending[n.name] || (n.granted() && !n.finished())) {
			out = append(out, n.name)
		}
	}
	return out
}
