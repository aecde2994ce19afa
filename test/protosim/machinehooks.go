package protosim

import (
	"fmt"
	"slices"

	corev1 "k8s.io/api/core/v1"

	"github.com/nodeward/nodeward/api/v1alpha1"
	"github.com/nodeward/nodeward/coordinator"
	"github.com/nodeward/nodeward/test/oracle"
)

// unfinishedGrant is a grant its agent has not reported finished: what the
// machine controller must never drain under.
const unfinishedGrant = oracle.UnfinishedGrant

// hookIdleEvents bounds, in events, how long nodeward's pre-drain hook
// may sit on a Machine whose node is not mid-update (no grant, no slot,
// or Degraded) before the hook sweep drops it. The sweep runs after a
// pool's pass (15% of events) once coordinator.HookSweepEvery has passed
// (the clock moves 1.7 s an event on average), and drops the hook once
// its cache shows the update over (a resync: 6% of events) and no grant
// of its is expected (a lost grant write's expectation lasts
// expectationTimeout, about 20 events); the drop itself fails with the
// API at most half the time. 300 events leaves all of this a margin that
// makes a false alarm improbable (below one in a million per episode).
const hookIdleEvents = 300

// syncMachines is the coordinator's Machine informers catching up: its
// cache becomes the API's Machines (machines mode only).
func (c *coordinatorModel) syncMachines() {
	if c.w.mach == nil {
		return
	}
	next := c.w.machineStates()
	if c.machinesGone == nil {
		c.machinesGone = map[string]string{}
	}
	for _, m := range c.machines {
		if m.Node != "" && !slices.ContainsFunc(next, func(n coordinator.MachineState) bool { return n.Name == m.Name }) {
			c.machinesGone[m.Node] = m.Key()
		}
	}
	for _, m := range next {
		if m.Node != "" {
			delete(c.machinesGone, m.Node)
		}
	}
	c.machines, c.machinesRV = next, c.w.rv
}

// machineKeyOf is what the controller records of node's Machine when its
// Node is deleted (machineIndex.keyOf).
func (c *coordinatorModel) machineKeyOf(node string) string {
	if key := coordinator.MachineKeyOf(c.machines, node); key != "" {
		return key
	}
	return c.machinesGone[node]
}

// holdHook is the controller's holdMachineHook before it writes a grant
// to node: the check of its cached Machine, the hook put on the API's
// Machine (a write that may fail), and the Machine read again. It
// reports whether the grant may be written.
func (c *coordinatorModel) holdHook(node string) bool {
	w := c.w
	m, ok, err := coordinator.MachineToHold(c.machines, node)
	if !ok {
		return true // no Machine, no hook
	}
	if err != nil {
		w.logf("coordinator: no grant to %s: %v", node, err)
		return false
	}
	api := w.machineOf(m.Name)
	if api == nil || w.apiFails() {
		w.logf("coordinator: no grant to %s: cannot hold the hook of %s", node, m.Name)
		return false
	}
	api.hooked = true
	if api.deleting {
		api.hooked = false
		w.logf("coordinator: no grant to %s: machine %s is being deleted (read after the hook)", node, m.Name)
		return false
	}
	return true
}

// sweepHooks is the controller's sweepMachineHooks, run after a pool's
// pass once coordinator.HookSweepEvery has passed: the hook dropped from
// every cached Machine whose node's update ended as the cache and the
// expectations show it.
func (c *coordinatorModel) sweepHooks() {
	w := c.w
	if w.mach == nil || w.now.Sub(c.swept) < coordinator.HookSweepEvery {
		return
	}
	c.swept = w.now
	for _, m := range c.machines {
		_, pending := c.pending[m.Node]
		if !m.Hooked || !coordinator.HookEnded(m, pending, c.cache[m.Node]) {
			continue
		}
		if api := w.machineOf(m.Name); api != nil && api.hooked && !w.apiFails() {
			api.hooked = false
			w.logf("coordinator: pre-drain hook dropped from %s (node %s)", m.Name, m.Node)
		}
	}
}

// checkMachineDrain runs as the machine controller drains m's node: the
// node must not be mid-update under a grant (nodeward's hook held the
// deletion until its update ended). A Degraded node is not mid-update
// (the sweep lets its Machine go, as the controller does).
func (w *World) checkMachineDrain(m *simMachine) {
	n := w.countable(w.nodes[m.node])
	a := n.Annotations
	if v1alpha1.Step(a[v1alpha1.AnnotationState]) == v1alpha1.StepDegraded || !unfinishedGrant.Counts(n) {
		return
	}
	w.violate("machine controller drains %s for machine %s mid-update under grant %s (%s)", m.node, m.name,
		a[v1alpha1.AnnotationGrant], a[v1alpha1.AnnotationState])
}

// checkHooks runs after every event: nodeward's hook stays on a Machine
// whose node is not mid-update for at most hookIdleEvents.
func (w *World) checkHooks() {
	x := w.mach
	x.events++
	for _, m := range x.machines {
		if !m.hooked || !coordinator.HookEnded(coordinator.MachineState{Node: m.node}, false, w.nodes[m.node]) {
			delete(x.hookIdle, m.name)
			continue
		}
		since, ok := x.hookIdle[m.name]
		if !ok {
			x.hookIdle[m.name] = x.events
		} else if x.events-since == hookIdleEvents {
			w.violate("nodeward's pre-drain hook on machine %s for %d events while node %q is not mid-update", m.name, hookIdleEvents, m.node)
		}
	}
}

// machineDown are the nodes other than node whose Machine is being
// deleted or failed, as the coordinator's Machine cache (c) knows it, and
// that in counts (its pool: selected in the API and in c's cache; or the
// control plane) both in the API and in c's cache; nodes the update
// already disrupts are left out (they count already).
func (w *World) machineDown(c *coordinatorModel, node string, counts func(*corev1.Node) bool) []string {
	if w.mach == nil {
		return nil
	}
	var out []string
	for _, m := range w.mach.machines {
		if m.node == "" || m.node == node || !(m.deleting || m.failed) || m.problemRV > c.machinesRV {
			continue
		}
		n, cached := w.nodes[m.node], c.cache[m.node]
		if n != nil && cached != nil && counts(n) && counts(cached) && !rule.Counts(w.countable(n)) {
			out = append(out, m.node)
		}
	}
	slices.Sort(out)
	return out
}

// checkControlPlaneMachines runs as the coordinator grants a control-plane
// node: no control-plane Machine it knows of is going away, failed or
// provisioning.
func (w *World) checkControlPlaneMachines(c *coordinatorModel, node string) {
	if w.mach == nil {
		return
	}
	for _, m := range w.mach.machines {
		if m.controlPlane && m.inProgress() && m.problemRV <= c.machinesRV {
			w.violate("grant on control-plane node %s while control-plane machine %s (node %q) is deleting %v, failed %v or provisioning",
				node, m.name, m.node, m.deleting, m.failed)
		}
	}
}

// machineNote names, for a violation, the nodes counted because of their
// Machine.
func machineNote(nodes []string) string {
	if len(nodes) == 0 {
		return ""
	}
	return fmt.Sprintf(" and %v, whose Machine is being deleted or failed", nodes)
}
