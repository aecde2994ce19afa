package coordinator

// The Machines a Snapshot carries, read by the same rules as the Machines
// the controller watches (machines.go), and the pre-drain hook's two
// decisions (machinehooks.go) as pure functions: what Decide's callers
// (the protocol simulator) need to model the Machine API as the controller
// meets it.

import (
	"maps"

	corev1 "k8s.io/api/core/v1"
)

// MachineState is one Machine as a Snapshot carries it: what the
// coordinator reads of a Machine of either Machine API.
type MachineState struct {
	// Name names the Machine (unique among a Snapshot's Machines).
	Name string
	// Node is the node the Machine's nodeRef names, "" while the Machine
	// provisions (its node has not joined yet).
	Node string
	// ControlPlane: the Machine is one of the control plane's.
	ControlPlane bool
	// Deleting: the Machine carries a deletion timestamp (a scale-down,
	// a remediation, a replacement).
	Deleting bool
	// Failed: the Machine's phase is Failed.
	Failed bool
	// Remediating: a health check or the Machine's owner is remediating
	// it (Cluster API's conditions).
	Remediating bool
	// Hooked: nodeward's pre-drain hook is on the Machine.
	Hooked bool
}

// HookSweepEvery is how often the controller sweeps the pre-drain hooks of
// the Machines whose node's update ended (sweepMachines).
const HookSweepEvery = machineSweepEvery

// Key is what a departure records of m (DepartedNode.Machine): the
// departure ends once no Machine of the Snapshot has this key.
func (m MachineState) Key() string { return "snapshot/" + m.Name }

// MachineKeyOf is the key of the one Machine of machines naming node, ""
// when none or several do (the controller's machineIndex.keyOf, less the
// Machines removed: the caller remembers those).
func MachineKeyOf(machines []MachineState, node string) string {
	r, ok := snapshotMachineIndex(machines, nil).machineOf(node)
	if !ok {
		return ""
	}
	return r.key
}

// record is m as the controller's index keeps a Machine.
func (m MachineState) record() machineRecord {
	r := machineRecord{key: m.Key(), api: "snapshot", name: m.Name, node: m.Node,
		controlPlane: m.ControlPlane, deleting: m.Deleting, hooked: m.Hooked}
	r.problem = machineProblem("machine "+m.Name, m.Deleting, m.Failed, "", m.Node, func() string {
		if m.Remediating {
			return "being remediated"
		}
		return ""
	})
	return r
}

// snapshotMachineIndex is the index of machines, and of the Machines
// gone (their keys by the node they named), as the controller's informers
// would fill it; nil for none, as where no Machine API is served.
func snapshotMachineIndex(machines []MachineState, gone map[string]string) *machineIndex {
	if len(machines) == 0 && len(gone) == 0 {
		return nil
	}
	x := newMachineIndex()
	for _, m := range machines {
		x.records[m.Key()] = m.record()
	}
	maps.Copy(x.gone, gone)
	x.rebuild()
	return x
}

// MachineToHold is the controller's check before it writes a grant to
// node (holdMachineHook): the one Machine whose pre-drain hook the grant
// holds, ok false when no Machine, or more than one, names node (no hook
// then); an error, and no grant, when that Machine is being deleted. The
// controller asks it of its cache before it holds the hook, and again of
// the API's copy once the hook is on (a deletion may have started in
// between): the second error drops the hook again.
func MachineToHold(machines []MachineState, node string) (MachineState, bool, error) {
	r, ok := snapshotMachineIndex(machines, nil).machineOf(node)
	if !ok {
		return MachineState{}, false, nil
	}
	for _, m := range machines {
		if m.Key() == r.key {
			return m, true, hookRefused(r)
		}
	}
	return MachineState{}, false, nil
}

// HookEnded reports whether the hook sweep (sweepMachineHooks) drops
// nodeward's hook from m: its node's update is over (nodeUpdating).
// pending: a grant written to m's node is not yet seen in the cache; node
// is the cached Node (nil: none).
func HookEnded(m MachineState, pending bool, node *corev1.Node) bool {
	return m.Node == "" || !(pending || nodeUpdating(node))
}
