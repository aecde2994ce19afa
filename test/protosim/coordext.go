package protosim

import (
	"errors"
	"fmt"
	"maps"
	"slices"
	"sort"
	"time"

	corev1 "k8s.io/api/core/v1"

	"github.com/nodeward/nodeward/api/v1alpha1"
	"github.com/nodeward/nodeward/coordinator"
	"github.com/nodeward/nodeward/gate"
)

// coordExt is the coordinator's extended model, as the controller keeps
// it: the pool informer's cache (which lags the API as the node cache
// does), the departures (Nodes seen deleted under an unfinished grant),
// and when each pool's gates were last evaluated. A failover loses all
// but what the pools' annotations persist.
type coordExt struct {
	pools     map[string]*v1alpha1.UpdatePool
	departed  map[string]coordinator.Departure
	evaluated map[string]time.Time
}

func newCoordExt() *coordExt {
	return &coordExt{pools: map[string]*v1alpha1.UpdatePool{}, departed: map[string]coordinator.Departure{},
		evaluated: map[string]time.Time{}}
}

// resyncExt is the extended part of a fresh list: the pools as the API
// has them, and a departure for every cached Node the list no longer has
// (the informer's delete of a missing key) or has as another object.
func (c *coordinatorModel) resyncExt() {
	clear(c.ext.pools)
	for name, p := range c.w.pools {
		c.ext.pools[name] = copyPool(p)
	}
	for name, old := range c.cache {
		// A key the list lacks is a delete of the cached copy; a key
		// whose object is another one (deleted and registered again
		// since) is an update from the cached copy, which departs too
		// (nodeIndex.nodeHandler).
		if n, ok := c.w.nodes[name]; !ok || n.UID != old.UID {
			c.dropped(old)
		}
	}
	for _, n := range c.w.nodes {
		c.delivered(n)
	}
}

// refreshPools delivers pool watch events, drawn from ext: all pending,
// one pool's, or none.
func (c *coordinatorModel) refreshPools() {
	switch c.w.ext.IntN(3) {
	case 0:
		clear(c.ext.pools)
		for name, p := range c.w.pools {
			c.ext.pools[name] = copyPool(p)
		}
	case 1:
		name := poolNames[c.w.ext.IntN(len(poolNames))]
		if p := c.w.pools[name]; p != nil {
			c.ext.pools[name] = copyPool(p)
		} else {
			delete(c.ext.pools, name)
		}
	}
}

// dropped is the index dropping a deleted Node: its departure is
// recorded first (Controller.nodeDeleted), under the grant still expected
// on it if any (the deleted object, a relist's tombstone carrying the
// cached copy, may not show it), else under the unfinished grant the
// object shows; then the expectation is dropped (expectations.gone).
func (c *coordinatorModel) dropped(old *corev1.Node) {
	if e, ok := c.pending[old.Name]; ok {
		c.departExpected(old.Name, e)
		return
	}
	if d, ok := coordinator.DepartureOf(old, c.w.now); ok {
		d.Machine = c.machineKeyOf(old.Name)
		c.ext.departed[old.Name] = d
		c.w.logf("coordinator: %s departed under grant %s", old.Name, d.Grant)
	}
}

// departExpected records the departure of node, its Node deleted while
// its grant e was expected, unless it is remembered under that grant
// already (departures.expected), and then drops e (expectations.gone).
func (c *coordinatorModel) departExpected(node string, e expectation) {
	if cur, ok := c.ext.departed[node]; !ok || cur.Grant != e.grant {
		c.ext.departed[node] = e.departs.At(c.w.now)
		c.w.logf("coordinator: %s departed under grant %s, expected, not yet seen", node, e.grant)
	}
	delete(c.pending, node)
}

// finalState is the object a watch's delete event carries for the cached
// old: the deleted object as the API last had it.
func (c *coordinatorModel) finalState(old *corev1.Node) *corev1.Node {
	if n := c.w.x.deletedByUID[old.UID]; n != nil {
		return n
	}
	return old
}

// delivered forgets a departure once a Node of its name is the machine
// back (departures.returned).
func (c *coordinatorModel) delivered(n *corev1.Node) {
	if dep, ok := c.ext.departed[n.Name]; ok && coordinator.MachineBack(dep.UID, n) {
		delete(c.ext.departed, n.Name)
		c.w.logf("coordinator: %s is back: its departure is over", n.Name)
	}
}

// cachedPools are the pool cache's copies, in name order.
func (c *coordinatorModel) cachedPools() []*v1alpha1.UpdatePool {
	out := make([]*v1alpha1.UpdatePool, 0, len(c.ext.pools))
	for _, p := range c.ext.pools {
		out = append(out, copyPool(p))
	}
	sort.Slice(out, func(i, j int) bool { return out[i].Name < out[j].Name })
	return out
}

var errPoolRead = errors.New("simulated API failure reading the pool")

// extend gives the snapshot what the extended controller reads besides
// the caches: the departures, the gates and the API's copy of the pool.
func (c *coordinatorModel) extend(snap *coordinator.Snapshot) {
	snap.Departed = maps.Clone(c.ext.departed)
	snap.GatesEvaluated = func(pool string) time.Time { return c.ext.evaluated[pool] }
	snap.Gates = c.evaluateGates
	snap.FreshPool = func(name string) (*v1alpha1.UpdatePool, error) {
		if c.w.apiFails() {
			return nil, errPoolRead
		}
		if p := c.w.pools[name]; p != nil {
			return copyPool(p), nil
		}
		return nil, nil
	}
}

// evaluateGates draws a verdict from ext: mostly passing, mostly failing
// while the pool's gates are sick.
func (c *coordinatorModel) evaluateGates(p *v1alpha1.UpdatePool) gate.Verdict {
	c.ext.evaluated[p.Name] = c.w.now
	pass := 90
	switch {
	case c.w.healed:
		pass = 100 // the fault phase is over: the cluster is healthy
	case c.w.x.gateSick[p.Name]:
		pass = 20
	}
	if c.w.ext.IntN(100) < pass {
		return gate.Verdict{Passing: true, Reason: gate.ReasonPassing, Message: "simulated"}
	}
	c.w.logf("coordinator: gates of %s fail", p.Name)
	return gate.Verdict{Reason: gate.ReasonAlertFiring, Message: "simulated alert firing"}
}

// writePool makes a pool write (persistDepartures, persistHalt): a merge
// patch of annotations, with no precondition. It reports whether the
// write succeeded: the pass ends at a failed one, whether it landed or
// not.
func (c *coordinatorModel) writePool(wr coordinator.Write) bool {
	w := c.w
	p := w.pools[wr.Pool]
	if p == nil {
		w.logf("coordinator: pool %s not found for %v", wr.Pool, describeSet(wr.Set))
		return false
	}
	if wr.ResourceVersion != "" && wr.ResourceVersion != p.ResourceVersion {
		w.logf("coordinator: pool %s changed since read (%s, now %s): %s refused", wr.Pool, wr.ResourceVersion, p.ResourceVersion, describeSet(wr.Set))
		return false
	}
	lost := w.apiFails()
	if lost && w.rng.IntN(2) == 0 {
		return false
	}
	before := p.Annotations
	p.Annotations = maps.Clone(p.Annotations)
	if p.Annotations == nil {
		p.Annotations = map[string]string{}
	}
	for k, v := range wr.Set {
		if v == nil {
			delete(p.Annotations, k)
		} else {
			p.Annotations[k] = *v
		}
	}
	changed := !maps.Equal(before, p.Annotations)
	if wr.Finalizers != nil && !slices.Equal(*wr.Finalizers, p.Finalizers) {
		p.Finalizers = slices.Clone(*wr.Finalizers)
		changed = true
	}
	if changed {
		w.bumpPool(p)
		w.logf("coordinator: pool %s %s finalizers %v", wr.Pool, describeSet(wr.Set), p.Finalizers)
	}
	if p.DeletionTimestamp != nil && len(p.Finalizers) == 0 {
		w.removePool(p)
	}
	return !lost
}

func describeSet(set map[string]*string) string {
	out := ""
	for _, k := range sortedKeys(set) {
		v := "<removed>"
		if set[k] != nil {
			v = *set[k]
		}
		out += fmt.Sprintf("%s=%s ", k, v)
	}
	return out
}

func sortedKeys(m map[string]*string) []string {
	keys := make([]string, 0, len(m))
	for k := range m {
		keys = append(keys, k)
	}
	sort.Strings(keys)
	return keys
}

// copyPool copies a pool as a cache or a GET would. Faults replace spec
// fields and the annotation map, never mutate them in place, so a
// shallow copy with its own annotation map is a copy.
func copyPool(p *v1alpha1.UpdatePool) *v1alpha1.UpdatePool {
	q := *p
	q.Annotations = maps.Clone(p.Annotations)
	return &q
}
