package protosim

// The machines mode (Scenario.Machines; -protosim.machines) puts
// Machines beneath the nodes and a machine controller beside them, as the
// Machine API runs them: Machines deleted (a remediation, whose MachineSet
// creates a replacement at once, or a scale-down), replaced (the new
// Machine first, the old one deleted once the new node joined) and failed
// (remediated later). On deletion the machine controller waits while
// nodeward's pre-drain hook is on the Machine, then cordons and drains the
// node, deletes the Node, and deletes the Machine; the machine is gone.
// The coordinator reads the Machines through its own cache (Snapshot.
// Machines) and holds the hook before every grant, as the controller does
// (coordinator.MachineToHold, HookEnded). Every draw comes from a fifth
// stream (machineWorld.rng), so the other modes' schedules stay as they
// were.

import (
	"fmt"
	"maps"
	"math/rand/v2"
	"slices"

	"github.com/nodeward/nodeward/coordinator"
	"github.com/nodeward/nodeward/test/oracle"
)

const (
	// machineFaultPercent is how often a fault-phase event is a machine
	// fault, and machineTurnPercent how often an event is a turn of the
	// machine controller (in both phases).
	machineFaultPercent = 3
	machineTurnPercent  = 8
)

// machineWorld is the Machine API's objects and the machine controller's
// progress. Machines are kept in creation order, so that every walk over
// them is the same on every replay.
type machineWorld struct {
	rng      *rand.Rand
	machines []*simMachine
	// made counts the Machines created, joined the nodes they brought.
	made, joined int
	// events counts the events played; hookIdle is, per Machine, the
	// event since which nodeward's hook sits on it while its node is not
	// mid-update (hookIdleEvents bounds it).
	events   int
	hookIdle map[string]int
}

// simMachine is one Machine.
type simMachine struct {
	name string
	// node is its node's name, "" while it provisions.
	node                           string
	controlPlane, deleting, failed bool
	hooked                         bool
	// labels are those its node registered with.
	labels map[string]string
	// joinIn is how many machine controller turns its node still takes
	// to join; replaces is the Machine deleted once it has.
	joinIn   int
	replaces string
	// replacedBy is the Machine created to replace it, whose node has not
	// joined yet: no other fault touches it meanwhile (a MachineSet makes
	// one replacement, not one per look).
	replacedBy string
	// drained: the machine controller cordoned and drained its node.
	drained bool
	// problemRV is the resourceVersion its node went out of service at
	// (deleted, failed, created without a node): the coordinator's
	// Machine cache knows it once synced at or after it.
	problemRV int
}

func newMachineStream(seed uint64) *rand.Rand {
	return rand.New(rand.NewPCG(seed^0x510e527fade682d1, seed+0x9b05688c2b3e6c1f))
}

// setupMachines gives nodes Machines, drawn per seed: every node, the
// workers only, or each node at even odds.
func (w *World) setupMachines() {
	cover := w.mach.rng.IntN(3)
	for _, name := range w.names {
		n := w.nodes[name]
		cp := oracle.IsControlPlane(n)
		if cover == 0 || (cover == 1 && !cp) || (cover == 2 && w.mach.rng.IntN(2) == 0) {
			w.mach.machines = append(w.mach.machines, &simMachine{name: "m-" + name, node: name, controlPlane: cp,
				labels: maps.Clone(n.Labels)})
		}
	}
}

// machineOf is the Machine named name, nil when the API has none.
func (w *World) machineOf(name string) *simMachine {
	for _, m := range w.mach.machines {
		if m.name == name {
			return m
		}
	}
	return nil
}

// machineStates are the Machines as the coordinator's informers read them.
func (w *World) machineStates() []coordinator.MachineState {
	out := make([]coordinator.MachineState, 0, len(w.mach.machines))
	for _, m := range w.mach.machines {
		out = append(out, coordinator.MachineState{Name: m.name, Node: m.node, ControlPlane: m.controlPlane,
			Deleting: m.deleting, Failed: m.failed, Hooked: m.hooked})
	}
	return out
}

// inProgress reports whether m is provisioning, failed or being deleted.
func (m *simMachine) inProgress() bool { return m.deleting || m.failed || m.node == "" }

// markDown records that m's node goes out of service now.
func (w *World) markDown(m *simMachine) {
	w.rv++
	m.problemRV = w.rv
}

// machineFault injects one machine fault, drawn from the machine stream.
// The control plane loses one Machine at a time (a control-plane machine
// set replaces them one by one, for etcd's quorum): no fault touches a
// control-plane Machine while another is in progress.
func (w *World) machineFault() string {
	faults := []struct {
		kind string
		do   func(m *simMachine) bool
	}{
		{"Machine deleted (remediation)", func(m *simMachine) bool { w.deleteMachine(m); w.provision(m, ""); return true }},
		{"Machine deleted (scale-down)", w.scaleDown},
		{"Machine replaced", func(m *simMachine) bool { w.provision(m, m.name); return true }},
		{"Machine failed", func(m *simMachine) bool { m.failed = true; w.markDown(m); return true }},
	}
	f := faults[w.mach.rng.IntN(len(faults))]
	var settled []*simMachine
	for _, m := range w.mach.machines {
		if !m.inProgress() && m.replacedBy == "" && (!m.controlPlane || !w.controlPlaneMachineBusy()) {
			settled = append(settled, m)
		}
	}
	if len(settled) == 0 {
		return f.kind + " (none settled)"
	}
	m := settled[w.mach.rng.IntN(len(settled))]
	if f.do(m) {
		w.logf("FAULT %s (%s of %s)", f.kind, m.name, m.node)
	}
	return f.kind
}

// controlPlaneMachineBusy reports whether a control-plane Machine is in
// progress.
func (w *World) controlPlaneMachineBusy() bool {
	return slices.ContainsFunc(w.mach.machines, func(m *simMachine) bool { return m.controlPlane && m.inProgress() })
}

func (w *World) deleteMachine(m *simMachine) {
	if !m.deleting {
		m.deleting = true
		w.markDown(m)
	}
}

// scaleDown deletes a worker's Machine with no replacement, while its
// pool keeps two other nodes.
func (w *World) scaleDown(m *simMachine) bool {
	n := w.nodes[m.node]
	if m.controlPlane || n == nil || len(w.poolLabelled(n.Labels[poolLabel])) < 3 {
		return false
	}
	w.deleteMachine(m)
	return true
}

// poolLabelled are the nodes whose pool label is value.
func (w *World) poolLabelled(value string) []string {
	var out []string
	for _, name := range w.sortedNames() {
		if w.nodes[name].Labels[poolLabel] == value {
			out = append(out, name)
		}
	}
	return out
}

// provision creates a Machine like old, without a node yet; replaces is
// the Machine to delete once its node joined ("" for none).
func (w *World) provision(old *simMachine, replaces string) {
	labels := maps.Clone(old.labels) // the labels it joined with
	if n := w.nodes[old.node]; n != nil {
		labels = maps.Clone(n.Labels) // relabelled since, maybe
	} else if w.x != nil && w.x.unregistered[old.node] != nil {
		labels = maps.Clone(w.x.unregistered[old.node]) // its Node deleted while it reboots
	}
	w.mach.made++
	m := &simMachine{name: fmt.Sprintf("m-new-%d", w.mach.made), controlPlane: old.controlPlane, labels: labels,
		joinIn: 1 + w.mach.rng.IntN(4), replaces: replaces}
	w.markDown(m)
	w.mach.machines = append(w.mach.machines, m)
	if replaces != "" {
		old.replacedBy = m.name
	}
	w.logf("machine controller: %s created to replace %s", m.name, old.name)
}

// machineTurn is one step of the machine controller (and of the health
// check remediating failed Machines), on one Machine in progress.
func (w *World) machineTurn() {
	var busy []*simMachine
	for _, m := range w.mach.machines {
		if m.inProgress() {
			busy = append(busy, m)
		}
	}
	if len(busy) == 0 {
		return
	}
	m := busy[w.mach.rng.IntN(len(busy))]
	switch {
	case m.deleting:
		w.deletionStep(m)
	case m.failed:
		if w.healed || w.mach.rng.IntN(3) == 0 {
			w.logf("machine health check: %s failed: remediated", m.name)
			w.deleteMachine(m)
			w.provision(m, "")
		}
	default:
		w.provisionStep(m)
	}
}

// provisionStep brings a provisioning Machine's node closer to joining;
// once it joins (Ready, with the labels of the node it replaces), the
// Machine it replaces is deleted.
func (w *World) provisionStep(m *simMachine) {
	if m.joinIn--; m.joinIn > 0 {
		return
	}
	prefix := "w"
	if m.controlPlane {
		prefix = "cp"
	}
	w.mach.joined++
	m.node = fmt.Sprintf("%s-new-%d", prefix, w.mach.joined)
	w.addNode(m.node, m.labels, fromOS)
	w.logf("machine controller: node %s of %s joined", m.node, m.name)
	if old := w.machineOf(m.replaces); old != nil {
		w.logf("machine controller: %s replaced: deleted", old.name)
		w.deleteMachine(old)
	}
}

// deletionStep is the machine controller's next step on a Machine being
// deleted: nothing while a pre-drain hook is on it; then the cordon and
// drain of its node, the Node's deletion, and the Machine's.
func (w *World) deletionStep(m *simMachine) {
	n := w.nodes[m.node]
	switch {
	case m.hooked:
		w.logf("machine controller: %s waits for its pre-drain hook", m.name)
	case n != nil && !m.drained:
		w.checkMachineDrain(m)
		n.Spec.Unschedulable = true
		w.bump(n)
		m.drained = true
		w.logf("machine controller: %s cordoned and drained for %s", m.node, m.name)
	case n != nil:
		w.machineGone(m.node)
		w.logf("machine controller: node %s of %s deleted", m.node, m.name)
	default:
		if m.node != "" {
			// The Node was deleted before (a fault): the instance goes
			// with the Machine all the same, and its kubelet never
			// registers the Node again.
			w.machineGone(m.node)
		}
		w.mach.machines = slices.DeleteFunc(w.mach.machines, func(x *simMachine) bool { return x == m })
		delete(w.mach.hookIdle, m.name)
		w.logf("machine controller: %s deleted", m.name)
	}
}

// machineGone deletes the Node of a machine that is being deleted: the
// Node and the machine are gone for good (its agent with it).
func (w *World) machineGone(name string) {
	old := w.nodes[name]
	delete(w.nodes, name)
	w.names = slices.DeleteFunc(w.names, func(s string) bool { return s == name })
	delete(w.agents, name)
	delete(w.hosts, name)
	delete(w.registering, name)
	delete(w.adminCordoned, name)
	delete(w.pdbBlocked, name)
	if w.x != nil {
		if old != nil {
			w.x.deletedByUID[old.UID] = old
		}
		delete(w.x.departed, name)
		delete(w.x.unregistered, name)
	}
}

// machinesSettled says why the Machines are not at rest, "" when they
// are: none in progress, no hook left on any.
func (w *World) machinesSettled() string {
	if w.mach == nil {
		return ""
	}
	for _, m := range w.mach.machines {
		switch {
		case m.inProgress():
			return fmt.Sprintf("machine %s in progress (node %q deleting %v failed %v hooked %v)", m.name, m.node, m.deleting, m.failed, m.hooked)
		case m.hooked:
			return fmt.Sprintf("nodeward's hook still on machine %s (node %s)", m.name, m.node)
		}
	}
	return ""
}
