package coordinator

import (
	"encoding/json"
	"fmt"
	"maps"
	"sort"
	"sync"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"

	"github.com/nodeward/nodeward/api/v1alpha1"
)

// departures owns the nodes whose Node object was deleted while they held
// an unfinished grant (a cloud controller or an admin deleting the Node of
// a machine that reboots). The machine beneath may still be down under
// that grant, so it counts as unavailable, in its pool and against the one
// control-plane node, until a Node of its name registers again, serves and
// its agent reports on it (MachineBack). Each pass writes its pool's departures to the pool
// (AnnotationDepartedNodes), so that a restart or a new leader keeps
// counting them; this memory covers the time until that write.
//
// A grant written but not yet shown by the node cache (an expectation)
// departs too when its Node is deleted: the deleted object, a relist's
// tombstone carrying the cached copy, may not show a grant that landed and
// that the machine took (Controller.nodeDeleted, expectations.gone).
//
// Ordering: a departure is recorded BEFORE the index drops the Node and
// BEFORE the expectation of a grant on it is dropped, and a pass reads the
// departures AFTER the expectations and the index, so that a pass finds
// the grant in the expectations, the index or the departures, never in
// none.
type departures struct {
	mu     sync.Mutex
	byNode map[string]Departure
}

// Departure is a node deleted while it held an unfinished grant, as the
// coordinator remembers it: the pool whose grant it held ("" when
// unknown: every pool counts it) and what the pool's
// AnnotationDepartedNodes records of it.
type Departure struct {
	Pool string
	v1alpha1.DepartedNode
}

// DepartureOf is what the coordinator remembers of a Node deleted at now:
// a departure when it held an unfinished grant, ok false otherwise.
func DepartureOf(n *corev1.Node, now time.Time) (d Departure, ok bool) {
	a := n.Annotations
	grant := a[v1alpha1.AnnotationGrant]
	if grant == "" || (a[v1alpha1.AnnotationStateGrant] == grant && v1alpha1.Step(a[v1alpha1.AnnotationState]).Finished()) {
		return Departure{}, false
	}
	return Departure{Pool: a[v1alpha1.AnnotationGrantPool], DepartedNode: v1alpha1.DepartedNode{
		Grant: grant, UID: n.UID, ControlPlane: isControlPlane(n), Zone: n.Labels[zoneLabel],
	}}.At(now), true
}

// At is d as remembered of a Node deleted at now.
func (d Departure) At(now time.Time) Departure {
	d.Since = metav1.NewTime(now.UTC().Truncate(time.Second))
	return d
}

// grantDeparture is the departure of v, granted grant by pool, should its
// Node be deleted before the node cache shows the grant (Departure.At the
// delete): what DepartureOf reads off a deleted object that shows it.
func grantDeparture(pool *v1alpha1.UpdatePool, v nodeView, grant string) Departure {
	return Departure{Pool: pool.Name, DepartedNode: v1alpha1.DepartedNode{
		Grant: grant, UID: v.uid, ControlPlane: v.controlPlane, Zone: v.zone, Machine: v.machine,
	}}
}

func newDepartures() *departures { return &departures{byNode: map[string]Departure{}} }

// record remembers n, whose Machine was machine ("" for none), if it held
// an unfinished grant when it was deleted.
func (d *departures) record(n *corev1.Node, machine string, now time.Time) {
	dep, ok := DepartureOf(n, now)
	if !ok {
		return
	}
	dep.Machine = machine
	d.mu.Lock()
	defer d.mu.Unlock()
	d.byNode[n.Name] = dep
}

// expected remembers node, deleted while exp was pending, as departed
// under exp's grant, unless it is remembered under that grant already.
func (d *departures) expected(node string, exp expectation, now time.Time) {
	d.mu.Lock()
	defer d.mu.Unlock()
	if cur, ok := d.byNode[node]; ok && cur.Grant == exp.grant {
		return
	}
	d.byNode[node] = exp.departs.At(now)
}

// returned forgets n's name once a Node of that name is the machine back
// (MachineBack).
func (d *departures) returned(n *corev1.Node) {
	d.mu.Lock()
	defer d.mu.Unlock()
	if dep, ok := d.byNode[n.Name]; ok && MachineBack(dep.UID, n) {
		delete(d.byNode, n.Name)
	}
}

// MachineBack reports whether n, a Node of a departed machine's name, is
// the machine back: another object than the departed one (uid; any object when
// uid is unknown), serving, on which the machine's agent has reported its
// update state. A kubelet registers the new Node and turns it Ready before
// the agent starts on it: until the agent reports, the Node does not say
// whether the machine is still mid-update under the departed grant (it
// reports Verifying, WaitingHealthy..., which count it unavailable) or
// done with it (chaos run seed 808547352: the Node registered Ready, the
// next control-plane node was granted, and the agent then reported
// Rebooting). Every agent reports on a Node of a new UID before it acts.
func MachineBack(uid types.UID, n *corev1.Node) bool {
	return n != nil && (uid == "" || n.UID != uid) && v1alpha1.NotServing(n) == "" &&
		n.Annotations[v1alpha1.AnnotationState] != ""
}

// all copies the remembered departures.
func (d *departures) all() map[string]Departure {
	d.mu.Lock()
	defer d.mu.Unlock()
	return maps.Clone(d.byNode)
}

// departedOf reads a pool's AnnotationDepartedNodes.
func departedOf(pool *v1alpha1.UpdatePool) (map[string]v1alpha1.DepartedNode, error) {
	return entriesOf(pool, v1alpha1.AnnotationDepartedNodes)
}

// entriesOf reads the pool's annotation key, a JSON object of
// DepartedNode by node name (AnnotationDepartedNodes,
// AnnotationGrantedNodes); none when it is absent.
func entriesOf(pool *v1alpha1.UpdatePool, key string) (map[string]v1alpha1.DepartedNode, error) {
	out := map[string]v1alpha1.DepartedNode{}
	raw := pool.Annotations[key]
	if raw == "" {
		return out, nil
	}
	if err := json.Unmarshal([]byte(raw), &out); err != nil {
		return nil, fmt.Errorf("pool %s: annotation %s: %w (a JSON object of {grant, uid, since} by node name)", pool.Name, key, err)
	}
	return out, nil
}

// poolDepartures is what one pass counts of departed nodes: the pool's
// own (persisted and remembered), those of unknown pool, and whether the
// pool's annotation must be written to match its own.
type poolDepartures struct {
	counted map[string]v1alpha1.DepartedNode
	own     map[string]v1alpha1.DepartedNode
	write   bool
}

// countDepartures sets what in counts of departed nodes: pool's own and
// those of unknown pool (departedFor) and, unless a control-plane node is
// busy already, a departed control-plane node of any pool. ended is the
// controller's index or a snapshot's (departureEnded).
func countDepartures(in *planInput, pool *v1alpha1.UpdatePool, pools []*v1alpha1.UpdatePool,
	remembered map[string]Departure, ended func(string, v1alpha1.DepartedNode) bool) error {
	var err error
	if in.departed, err = departedFor(pool, remembered, ended); err != nil {
		return err
	}
	if in.controlPlaneBusy == "" {
		in.controlPlaneBusy = departedControlPlane(pools, remembered, ended)
	}
	return nil
}

// departedFor merges pool's persisted departures with the remembered ones,
// less those ended (the machine back or gone for good).
func departedFor(pool *v1alpha1.UpdatePool, remembered map[string]Departure, ended func(string, v1alpha1.DepartedNode) bool) (poolDepartures, error) {
	persisted, err := departedOf(pool)
	if err != nil {
		return poolDepartures{}, err
	}
	pd := poolDepartures{counted: map[string]v1alpha1.DepartedNode{}, own: map[string]v1alpha1.DepartedNode{}}
	for name, dn := range persisted {
		if !ended(name, dn) {
			pd.own[name] = dn
		}
	}
	for name, dep := range remembered {
		switch {
		case ended(name, dep.DepartedNode):
		case dep.Pool == pool.Name:
			pd.own[name] = dep.DepartedNode
		case dep.Pool == "":
			pd.counted[name] = dep.DepartedNode
		}
	}
	maps.Copy(pd.counted, pd.own)
	pd.write = !sameEntries(pd.own, persisted)
	return pd, nil
}

// departureEnded is when a departure ends, for a pass that read the
// Machines as machines: the index holds a Node of its name, other than the
// departed object, that serves (the machine is back, MachineBack), or the
// node's Machine is gone (the machine deleted for good: it never comes
// back; protocol simulator, machines mode, seeds 2000022, 2000040,
// 2000380: its departure, or a grant record never settled, held its pool
// and the control plane for ever).
// lookup is the Nodes by name: the controller's index, a snapshot's.
func departureEnded(lookup func(string) *corev1.Node, machines machineView) func(string, v1alpha1.DepartedNode) bool {
	return func(name string, dn v1alpha1.DepartedNode) bool {
		return MachineBack(dn.UID, lookup(name)) || machines.gone(dn.Machine)
	}
}

// departedControlPlane says why a departed control-plane node, of any
// pool, persisted or remembered, that is not back keeps the cluster's one
// control-plane slot ("" for none).
func departedControlPlane(pools []*v1alpha1.UpdatePool, remembered map[string]Departure, ended func(string, v1alpha1.DepartedNode) bool) string {
	var names []string
	add := func(name string, dn v1alpha1.DepartedNode) {
		if dn.ControlPlane && !ended(name, dn) {
			names = append(names, name)
		}
	}
	for _, p := range pools {
		persisted, err := departedOf(p)
		if err != nil {
			continue // reported by that pool's own pass
		}
		for name, dn := range persisted {
			add(name, dn)
		}
	}
	for name, dep := range remembered {
		add(name, dep.DepartedNode)
	}
	if len(names) == 0 {
		return ""
	}
	sort.Strings(names)
	return "control-plane node " + names[0] + " (" + departedWhy + ") is unavailable: one control-plane node at a time, cluster-wide"
}

// departedWhy is how a departed node counts.
const departedWhy = "Node object deleted mid-update; counted until it registers again, serves and its agent reports"

// departedValue is the AnnotationDepartedNodes value that records own,
// nil (the annotation removed) when own is empty.
func departedValue(pool *v1alpha1.UpdatePool, own map[string]v1alpha1.DepartedNode) (*string, error) {
	return entriesValue(pool, own, "departed nodes")
}

// entriesValue is the annotation value of entries (departed nodes, grant
// records: what), nil (the annotation removed) when there are none.
func entriesValue(pool *v1alpha1.UpdatePool, entries map[string]v1alpha1.DepartedNode, what string) (*string, error) {
	if len(entries) == 0 {
		return nil, nil
	}
	b, err := json.Marshal(entries)
	if err != nil {
		return nil, fmt.Errorf("encode %s of pool %s: %w", what, pool.Name, err)
	}
	value := string(b)
	return &value, nil
}

// sameEntries reports whether two sets of departed nodes (or of grant
// records) say the same: an entry read back from its annotation has its
// time in the local zone, one made in this pass in UTC.
func sameEntries(a, b map[string]v1alpha1.DepartedNode) bool {
	return maps.EqualFunc(a, b, func(x, y v1alpha1.DepartedNode) bool {
		return x.Grant == y.Grant && x.UID == y.UID && x.ControlPlane == y.ControlPlane && x.Zone == y.Zone && x.Since.Equal(&y.Since)
	})
}
