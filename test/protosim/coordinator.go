package protosim

import (
	"fmt"
	"sort"
	"time"

	corev1 "k8s.io/api/core/v1"

	"github.com/nodeward/nodeward/api/v1alpha1"
	"github.com/nodeward/nodeward/coordinator"
)

// expectationTimeout is how long a grant write whose answer was lost
// counts before the API decides (coordinator.Config.ExpectationTimeout).
const expectationTimeout = 30 * time.Second

// coordinatorModel is the leader: the real planning code (coordinator.
// Decide) over a cache that lags the API, with the controller's
// expectations and conditional writes modelled around it. A failover
// builds a new one: a fresh list, no expectations.
type coordinatorModel struct {
	w       *World
	cache   map[string]*corev1.Node
	pending map[string]expectation
	grants  int
	// ext is the extended mode's part (nil in classic mode): a pool cache
	// that lags the API too, the departures and the gates' last
	// evaluations.
	ext *coordExt
	// term is the leader term this coordinator holds (fenced mode; nil
	// otherwise); held, when set, collects a pass's writes instead of
	// making them (a leader paused right after planning); deposed marks a
	// paused leader resumed after another took over.
	term    *v1alpha1.LeaderTerm
	held    *[]coordinator.Write
	deposed bool
	// machines are the Machines as its informers last delivered them
	// (machines mode), at the resourceVersion machinesRV; swept is its
	// last hook sweep.
	machines   []coordinator.MachineState
	machinesRV int
	// machinesGone are the Machines its informers saw removed, by the
	// node they named (the controller's machineIndex.gone).
	machinesGone map[string]string
	swept        time.Time
}

// expectation is a grant written but not yet seen in the cache, and the
// departure it stands for should its Node be deleted meanwhile
// (coordinator.Write.Departs).
type expectation struct {
	grant   string
	since   time.Time
	departs coordinator.Departure
}

func newCoordinator(w *World) *coordinatorModel {
	c := &coordinatorModel{w: w, cache: map[string]*corev1.Node{}, pending: map[string]expectation{}, term: w.takeOver()}
	if w.x != nil {
		c.ext = newCoordExt()
	}
	c.resync()
	return c
}

// resync is a fresh list: the cache equals the API.
func (c *coordinatorModel) resync() {
	if c.ext != nil {
		c.resyncExt()
	}
	clear(c.cache)
	for name, n := range c.w.nodes {
		c.cache[name] = n.DeepCopy()
	}
	c.syncMachines()
}

// refresh delivers watch events: one node's, or all that are pending.
func (c *coordinatorModel) refresh() {
	if c.ext != nil {
		defer c.refreshPools()
	}
	if c.w.rng.IntN(2) == 0 {
		c.resync()
		return
	}
	c.syncMachines()
	name := c.w.names[c.w.rng.IntN(len(c.w.names))]
	if n, ok := c.w.nodes[name]; ok {
		if old := c.cache[name]; old != nil && c.ext != nil && old.UID != n.UID {
			c.dropped(c.finalState(old)) // the watch delivers the delete, then the add
		}
		c.cache[name] = n.DeepCopy()
		if c.ext != nil {
			c.delivered(n)
		}
	} else {
		if old := c.cache[name]; old != nil && c.ext != nil {
			c.dropped(c.finalState(old))
		}
		delete(c.cache, name)
	}
}

// settle drops the expectations the cache shows, and those the API, asked
// after expectationTimeout, shows never landed. In extended mode, as the
// controller does, a node the API no longer has keeps its expectation
// while the cache holds its Node (the cache's delete records the
// departure, dropped) and departs under it once the cache does not.
func (c *coordinatorModel) settle() {
	for node, e := range c.pending {
		if n := c.cache[node]; n != nil && n.Annotations[v1alpha1.AnnotationGrant] == e.grant {
			delete(c.pending, node)
			continue
		}
		if n := c.cache[node]; c.ext != nil && n != nil && replacedSince(n, e) {
			c.departExpected(node, e) // observe: the cache holds another object of the name
			continue
		}
		if c.w.now.Sub(e.since) < expectationTimeout {
			continue
		}
		n := c.w.nodes[node]
		switch {
		case c.ext != nil && n != nil && replacedSince(n, e):
			c.departExpected(node, e) // check: the API has another object of the name
		case n != nil && n.Annotations[v1alpha1.AnnotationGrant] == e.grant:
		case n != nil || c.ext == nil:
			delete(c.pending, node)
		case c.cache[node] == nil:
			c.departExpected(node, e)
		}
	}
}

// reconcile plans every pool, in name order, and makes the writes.
func (c *coordinatorModel) reconcile() {
	c.settle()
	pools := make([]*v1alpha1.UpdatePool, 0, len(c.w.pools))
	for _, p := range c.w.pools {
		q := *p // faults replace spec fields, never mutate them in place
		pools = append(pools, &q)
	}
	if c.ext != nil {
		pools = c.cachedPools()
	}
	sort.Slice(pools, func(i, j int) bool { return pools[i].Name < pools[j].Name })
	for _, p := range pools {
		nodes := make([]*corev1.Node, 0, len(c.cache))
		for _, n := range c.cache {
			nodes = append(nodes, n)
		}
		pending := map[string]bool{}
		for node := range c.pending {
			pending[node] = true
		}
		snap := coordinator.Snapshot{Pools: pools, Nodes: nodes, AgentAlive: c.w.leaseOK, Pending: pending, Now: c.w.now,
			LeaderTerm: c.term, Machines: c.machines, MachinesGone: c.machinesGone}
		if c.ext != nil {
			c.extend(&snap)
		}
		writes, err := coordinator.Decide(p.Name, snap, c.nextGrant)
		if err != nil {
			c.w.logf("coordinator: pool %s: %v", p.Name, err)
			continue
		}
		if c.held != nil {
			*c.held = append(*c.held, writes...)
			continue
		}
		for _, wr := range writes {
			if wr.Pool != "" {
				if !c.writePool(wr) {
					break // reconcile returns at a failed pool write
				}
				continue
			}
			c.write(wr)
		}
		c.sweepHooks() // after each pool's pass, as the controller's worker
	}
}

// nextGrant names a grant: in extended mode as the controller does
// (coordinator.GrantName: a canary counts its nodes by the config their
// grant names), in classic mode as the classic schedules always did.
func (c *coordinatorModel) nextGrant(pool *v1alpha1.UpdatePool, node, avoid string) string {
	for {
		c.grants++
		name := fmt.Sprintf("g%d-%s", c.grants, node)
		if c.ext != nil {
			name = coordinator.GrantName(pool, c.w.now, c.grants)
		}
		if name != avoid {
			return name
		}
	}
}

// write makes one conditional write. A grant's expectation is recorded
// before it; a write refused as stale drops it; a write whose answer is
// lost may or may not have landed, and the expectation stays until settle
// decides. A stale release is retried once if the grant is unchanged, as
// the controller does.
func (c *coordinatorModel) write(wr coordinator.Write) {
	w := c.w
	if wr.Grant != "" && !c.holdHook(wr.Node) {
		return // the controller's grant returns at the hook
	}
	if wr.Grant != "" {
		c.pending[wr.Node] = expectation{grant: wr.Grant, since: w.now, departs: wr.Departs}
	}
	n := w.nodes[wr.Node]
	stale := n == nil || n.ResourceVersion != wr.ResourceVersion
	if stale && wr.Grant == "" && n != nil && wr.Set[v1alpha1.AnnotationGrant] == nil {
		cached := c.cache[wr.Node]
		stale = cached == nil || n.Annotations[v1alpha1.AnnotationGrant] != cached.Annotations[v1alpha1.AnnotationGrant]
	}
	if stale {
		if wr.Grant != "" {
			delete(c.pending, wr.Node)
		}
		return
	}
	lost := w.apiFails()
	if lost && w.rng.IntN(2) == 0 {
		return // the write never landed; its answer was lost too
	}
	if wr.Grant != "" && c.deposed {
		// Checked by what agents do with it: they must refuse it.
		w.logf("coordinator (deposed, term %d): grant %s to %s", c.term.Transitions, wr.Grant, wr.Node)
	} else if wr.Grant != "" {
		w.checkGrant(wr.Node, c)
		if w.x != nil {
			w.checkGrantGuardrails(wr)
		}
		w.logf("coordinator: grant %s to %s", wr.Grant, wr.Node)
	}
	_ = w.patchAnnotations(wr.Node, wr.Set)
}

// replacedSince reports whether n is another object than the Node e's
// grant was written to (expectations' replaced).
func replacedSince(n *corev1.Node, e expectation) bool {
	return e.departs.UID != "" && n.UID != e.departs.UID
}
