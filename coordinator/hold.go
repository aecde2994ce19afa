package coordinator

import (
	"cmp"
	"fmt"
	"maps"
	"slices"
)

// hold says why a pool with nodes left to update grants none now, once:
// reason is what an alert can select on (the reason label of
// nodeward_pool_waiting), message the operator's words in the Updating
// condition. A pool that grants, or has nothing to do, holds with
// waitNone.
type hold struct {
	reason  waitReason
	message string
}

// waitReason is a fixed set: nodeward_pool_waiting has one series per pool
// and reason.
type waitReason string

const (
	waitNone          waitReason = "none"           // nothing to do, or progressing
	waitPaused        waitReason = "paused"         // spec.paused
	waitDeleting      waitReason = "deleting"       // the pool is being deleted: it waits for its grants to settle
	waitHalted        waitReason = "halted"         // the failure budget is exhausted, a canary failed or no node can be one, or a gate failed during a soak
	waitGatesFailing  waitReason = "gates_failing"  // a health gate holds new grants
	waitSoaking       waitReason = "soaking"        // staged nodes wait for nodes soaking after Done (or a canary baking)
	waitOutsideWindow waitReason = "outside_window" // no maintenance window open
	waitLimitReached  waitReason = "limit_reached"  // staged nodes wait: maxUnavailable (or the one control-plane node) is used up
	waitStaging       waitReason = "staging"        // no node has staged the target yet
	waitDrainBlocked  waitReason = "drain_blocked"  // a granted node's drain waits on a PDB, an eviction or a hook
	waitDegraded      waitReason = "degraded"       // a node failed on the target and holds its slot
)

// waitReasons lists every waitReason.
func waitReasons() []waitReason {
	return []waitReason{waitNone, waitPaused, waitDeleting, waitHalted, waitGatesFailing, waitOutsideWindow, waitLimitReached, waitSoaking,
		waitStaging, waitDrainBlocked, waitDegraded}
}

// decideGrants is the last phase: the nodes to grant, or the hold that
// says why none.
func (p *poolPlan) decideGrants(in planInput, c candidacy, busyZones map[string]bool) error {
	h, open, err := p.holdOf(in, c)
	if err != nil {
		return err
	}
	p.hold = h
	if !open {
		return nil
	}
	// One control-plane node at a time, cluster-wide, whatever pools
	// select them: none while another is unavailable or keeps its slot,
	// at most one here.
	controlPlane, busy := 1, cmp.Or(in.controlPlaneBusy, p.controlPlaneSlotKept(in.controlPlaneSlots))
	if busy != "" {
		controlPlane = 0
	}
	p.grant = pickGrants(c.nodes, busyZones, p.limit-len(p.unavailable), controlPlane, p.queue)
	if len(p.grant) == 0 {
		p.hold = hold{reason: c.reason(p, in.gates)}
		if controlPlane == 0 {
			p.hold.message = busy
		}
	}
	return nil
}

// controlPlaneSlotKept says why no control-plane node may be granted
// because one keeps the slot of a finished grant (slots: node → why), or
// "" when none does. One this plan releases keeps it too, until the
// release is seen (releasingWhy).
func (p *poolPlan) controlPlaneSlotKept(slots map[string]string) string {
	if len(slots) == 0 {
		return ""
	}
	name := slices.Sorted(maps.Keys(slots))[0]
	return "control-plane node " + name + " (" + slots[name] + ") keeps its slot: one control-plane node at a time, cluster-wide"
}

// holdOf decides, in one order, whether the pool may grant now (open) or
// what holds it: nothing to do; the operator's choices (pause, halt,
// maintenance windows); a budget of zero; the budget used up; the gates.
// The reason names what holds the rollout (candidacy.reason), the message
// the first thing that stops this pass's grant.
func (p *poolPlan) holdOf(in planInput, c candidacy) (h hold, open bool, err error) {
	spec := in.pool.Spec
	if p.target == "" || !c.left {
		return hold{reason: waitNone}, false, nil
	}
	windowOpen, windowErr := inWindow(spec.MaintenanceWindows, in.now)
	switch {
	case windowErr != nil && len(c.nodes) > 0:
		return hold{}, false, windowErr
	case in.pool.DeletionTimestamp != nil:
		return hold{waitDeleting, "pool is being deleted: nothing more is granted, and it goes once the grants it recorded are settled"}, false, nil
	case spec.Paused:
		return hold{waitPaused, "pool is paused"}, false, nil
	case p.halted.reason != "":
		return hold{waitHalted, p.halted.message}, false, nil
	case windowErr == nil && !windowOpen:
		return hold{waitOutsideWindow, "outside every maintenance window"}, false, nil
	}
	reason := c.reason(p, in.gates)
	free := p.limit - len(p.unavailable)
	switch v := in.gates; {
	case len(c.nodes) == 0:
		if c.staging > 0 && free > 0 {
			return hold{reason, fmt.Sprintf("%d nodes still staging the target", c.staging)}, false, nil
		}
		return hold{reason: reason}, false, nil
	case p.limit == 0:
		return hold{reason, "maxUnavailable " + spec.MaxUnavailable.String() + " resolves to 0: no node is granted"}, false, nil
	case free <= 0:
		return hold{reason, fmt.Sprintf("%d of at most %d nodes unavailable", len(p.unavailable), p.limit)}, false, nil
	case spec.Gates == nil:
		return hold{reason: waitNone}, true, nil
	case v == nil:
		p.needGates = true
		return hold{reason, "evaluating the gates"}, false, nil
	case !v.passing:
		return hold{reason, "gates failing: " + v.reason + ": " + v.message}, false, nil
	}
	return hold{reason: waitNone}, true, nil
}

// reason is what holds a pool that grants nothing: with candidates,
// failing gates, then what holds the budget (a blocked drain, a degraded
// node), then soaks, then the budget itself; without, a blocked drain, a
// degraded node, then staging.
func (c candidacy) reason(p *poolPlan, gates *gateVerdict) waitReason {
	has := len(c.nodes) > 0
	switch {
	case has && gates != nil && !gates.passing:
		return waitGatesFailing
	case c.drainBlocked:
		return waitDrainBlocked
	case len(p.degraded) > 0:
		return waitDegraded
	case has && len(p.soaking)+len(p.soakOver) > 0:
		return waitSoaking
	case has:
		return waitLimitReached
	case c.staging > 0:
		return waitStaging
	}
	return waitNone
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
