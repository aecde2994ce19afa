package coordinator

import (
	"cmp"
	"fmt"
	"maps"
	"slices"
	"time"

	corev1 "k8s.io/api/core/v1"

	"github.com/nodeward/nodeward/api/v1alpha1"
	"github.com/nodeward/nodeward/gate"
)

// Snapshot is everything one plan of a pool reads, without a cache or an
// API server behind it.
type Snapshot struct {
	// Pools are every pool, as the coordinator's cache holds them
	// (overlaps and grant owners depend on all).
	Pools []*v1alpha1.UpdatePool
	Nodes []*corev1.Node
	// Machines are the Machines beneath the nodes, as the controller's
	// Machine informers hold them; nil where no Machine API is served. A
	// node whose Machine is being deleted, failed or remediated counts as
	// unavailable, and no control-plane node is granted while a
	// control-plane Machine is going away or provisioning (machines.go).
	// The hook the controller holds on a Machine before a grant is the
	// caller's to model (MachineToHold, HookEnded).
	Machines []MachineState
	// MachinesGone are the Machines the informers saw removed, their keys
	// (MachineState.Key) by the node they named, until another Machine
	// names it: a Node still cached whose Machine is gone, granted or
	// departing, is of a machine deleted for good.
	MachinesGone map[string]string
	// AgentAlive reports whether a node's agent renews its Lease.
	AgentAlive func(node string) bool
	// Pending are the grants written but not yet seen in Nodes. A node
	// whose Node is deleted while its grant is pending departs (Departed,
	// from its grant Write's Departs).
	Pending map[string]bool
	// Departed are the nodes the coordinator saw deleted while they held
	// an unfinished grant (DepartureOf) or while a grant written to them
	// was pending (Write.Departs), by name; nil for none.
	Departed map[string]Departure
	Now      time.Time
	// Gates evaluates a pool's gates. Nil: they are never evaluated, and a
	// pool with gates grants nothing and ends no soak, as when Prometheus
	// cannot be reached.
	Gates func(pool *v1alpha1.UpdatePool) gate.Verdict
	// GatesEvaluated is when a pool's gates were last evaluated (zero:
	// never); nil for never. A verdict older than Resync is renewed while
	// nodes wait or soak, as the controller does.
	GatesEvaluated func(pool string) time.Time
	// Resync is the controller's Config.Resync; 5 s when zero.
	Resync time.Duration
	// FreshPool is the API server's copy of a pool (a quorum read; nil
	// when the pool is gone), read before a plan that grants, releases or
	// starts a soak is written; an error ends the pass with no write, as
	// in reconcile. Nil: the cached copy is taken as fresh.
	FreshPool func(name string) (*v1alpha1.UpdatePool, error)
	// LeaderTerm is the leadership the grants are issued in (nil: none,
	// as without leader election).
	LeaderTerm *v1alpha1.LeaderTerm
}

// Write is one annotation patch the plan calls for (a merge patch: nil
// removes a key): on a node, to be made only while the node is still at
// ResourceVersion, as the controller makes it; or, when Pool is set, on
// that pool: its bookkeeping (departed nodes, grant records) only while
// the pool is still at ResourceVersion, a halt unconditionally
// (ResourceVersion "").
type Write struct {
	Node, ResourceVersion string
	// Pool names the pool a pool write patches; "" for a node write.
	Pool string
	// Grant is the new grant's name for a grant write, "" otherwise.
	Grant string
	// Departs is, for a grant write, the departure the controller records
	// (Departure.At the delete) should the Node be deleted while the grant
	// is expected, written but not yet shown by its cache: as
	// DepartureOf reads it off a deleted object that shows the grant.
	Departs Departure
	Set     map[string]*string
	// Finalizers, on a pool's bookkeeping, is the pool's whole list of
	// finalizers to write (nil: unchanged): FinalizerGrants added with the
	// first record, removed with the last.
	Finalizers *[]string
}

// Decide is the controller's reconcile of pool over snap, the writes it
// makes, in order: the same planning code and the same sequence as
// Controller.reconcile, for the protocol simulator. It plans; evaluates
// the gates when the plan needs their verdict (snap.Gates) and plans again
// with it; reads the pool afresh before a plan that writes slots
// (snap.FreshPool) and plans again if it changed (nothing at all when it is
// gone); then returns the pool's bookkeeping (its departed nodes and the
// records of the grants it is about to write) if it changed, and either
// the halt a gate failing during a soak calls for — and nothing else in
// that pass — or the node writes (targets, grants, soak starts, releases,
// then the drain policy of the nodes in flight).
// grantName names each new grant of pool on node, never avoid (the grant
// the node's agent last reported on), as the controller's GrantName does.
func Decide(pool string, snap Snapshot, grantName GrantNamer) ([]Write, error) {
	var p *v1alpha1.UpdatePool
	for _, candidate := range snap.Pools {
		if candidate.Name == pool {
			p = candidate
		}
	}
	if p == nil {
		return nil, fmt.Errorf("pool %s not in the snapshot", pool)
	}
	in, plan, err := decidePlan(p, snap)
	if err != nil {
		return nil, err
	}
	lookup := snapshotLookup(snap)
	names, set, err := passWrites(p, in, plan, lookup, grantName)
	if err != nil {
		return nil, err
	}
	if (writesSlots(plan) || set != nil) && snap.FreshPool != nil {
		fresh, err := snap.FreshPool(pool)
		if err != nil || fresh == nil {
			return nil, err
		}
		if poolChanged(p, fresh) {
			p = fresh
			if in, plan, err = decidePlan(p, snap); err != nil {
				return nil, err
			}
			if names, set, err = passWrites(p, in, plan, lookup, grantName); err != nil {
				return nil, err
			}
		}
		if set != nil {
			set.ResourceVersion = fresh.ResourceVersion
		}
	}
	var out []Write
	if set != nil {
		out = append(out, *set)
	}
	if plan.gateHalt != "" {
		halt := HaltedByGate(p, plan.gateHalt)
		return append(out, Write{Pool: p.Name, Set: map[string]*string{v1alpha1.AnnotationHalted: &halt}}), nil
	}
	return append(out, nodeWrites(p, in, plan, names, snap.LeaderTerm)...), nil
}

// snapshotLookup finds a Node of snap by name (nil: none).
func snapshotLookup(snap Snapshot) func(string) *corev1.Node {
	byName := make(map[string]*corev1.Node, len(snap.Nodes))
	for _, n := range snap.Nodes {
		byName[n.Name] = n
	}
	return func(name string) *corev1.Node { return byName[name] }
}

// GrantNamer names a new grant of pool on node; it must not return avoid,
// the grant the node's agent last reported on.
type GrantNamer func(pool *v1alpha1.UpdatePool, node, avoid string) string

// decidePlan is Controller.plan over a snapshot: a plan, and when it
// wants the gates' verdict, a plan with it.
func decidePlan(p *v1alpha1.UpdatePool, snap Snapshot) (planInput, *poolPlan, error) {
	in, plan, err := decidePass(p, snap, nil)
	if err != nil || p.Spec.Gates == nil || snap.Gates == nil {
		return in, plan, err
	}
	var evaluated time.Time
	if snap.GatesEvaluated != nil {
		evaluated = snap.GatesEvaluated(p.Name)
	}
	if !wantsVerdict(plan, evaluated, snap.Now, cmp.Or(snap.Resync, 5*time.Second)) {
		return in, plan, nil
	}
	answer := snap.Gates(p)
	return decidePass(p, snap, &gateVerdict{passing: answer.Passing, reason: answer.Reason, message: answer.Message})
}

// decidePass is Controller.planPass over a snapshot, the departed nodes
// counted as Controller.input counts them.
func decidePass(p *v1alpha1.UpdatePool, snap Snapshot, gates *gateVerdict) (planInput, *poolPlan, error) {
	in, _, err := buildInput(p, snap.Pools, snap.Nodes, snapshotMachineIndex(snap.Machines, snap.MachinesGone), snap.AgentAlive, snap.Pending, map[string]bool{}, snap.Now)
	if err != nil {
		return in, nil, err
	}
	lookup := snapshotLookup(snap)
	remembered := withRecorded(snap.Departed, recordedDepartures(snap.Pools, lookup))
	if err := countDepartures(&in, p, snap.Pools, remembered, departureEnded(lookup, in.machines)); err != nil {
		return in, nil, err
	}
	in.gates = gates
	plan, err := planPool(in)
	if err != nil {
		return in, nil, fmt.Errorf("plan pool %s: %w", p.Name, err)
	}
	return in, plan, nil
}

// nodeWrites are the node writes of Controller.apply, in its order.
func nodeWrites(p *v1alpha1.UpdatePool, in planInput, plan *poolPlan, names map[string]string, term *v1alpha1.LeaderTerm) []Write {
	views := planned(plan, in.nodes)
	var out []Write
	for _, n := range plan.setTarget {
		out = append(out, Write{Node: n, ResourceVersion: views[n].rv, Set: coordinatorKeys(p, plan.target)})
	}
	for _, n := range plan.grant {
		g := names[n]
		out = append(out, Write{Node: n, ResourceVersion: views[n].rv, Grant: g, Departs: grantDeparture(p, views[n], g),
			Set: grantAnnotations(p, plan.target, g, plan.releaseAtDone, term)})
	}
	yielded := map[string]bool{}
	for _, n := range plan.yielded {
		yielded[n] = true
	}
	for _, n := range slices.Sorted(maps.Keys(plan.startSoak)) {
		at := plan.startSoak[n].UTC().Format(time.RFC3339)
		out = append(out, Write{Node: n, ResourceVersion: views[n].rv, Set: map[string]*string{v1alpha1.AnnotationSoakUntil: &at}})
	}
	for _, n := range plan.release {
		out = append(out, Write{Node: n, ResourceVersion: views[n].rv, Set: releaseAnnotations(yielded[n], in.now)})
	}
	stale, policy := stalePolicies(p, in, views)
	for _, v := range stale {
		out = append(out, Write{Node: v.name, ResourceVersion: v.rv, Set: maps.Clone(policy)})
	}
	return out
}
