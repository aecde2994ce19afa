package chaos

import (
	"fmt"
	"slices"
	"time"

	corev1 "k8s.io/api/core/v1"

	"github.com/nodeward/nodeward/test/oracle"
)

// What the watcher counts beyond the Nodes it sees: a Node deleted while
// its machine was down under an unfinished grant (docs/protocol.md: it
// does not free its slot until a Node of its name registers again and
// serves), and a node soaking or baking with its slot kept
// (docs/guardrails.md: it counts against maxUnavailable until its release
// is seen).

const keySoakUntil = "update.nodeward.io/soak-until"

// VForcedUnderRetry: a PDB-blocked pod was gone from its node when the
// node went down for its reboot, its blocker still in place, while the
// pool that granted the node had said onTimeout Retry (not Force) for the
// whole time the pod was there, give or take PolicyGrace.
const VForcedUnderRetry = "forced-under-retry"

// departure is a Node deleted while it held an unfinished grant, as last
// seen.
type departure struct {
	node *corev1.Node
	at   time.Time
}

// depart drops the Node named name, last seen as last (the deleted
// object, or the cached one when a relist or a new UID shows the deletion):
// with an unfinished grant it goes on counting as departed; the pins on it
// lapse (the pod garbage collector deletes the pods of a deleted Node).
func (w *Watcher) depart(name string, last *corev1.Node) {
	delete(w.nodes, name)
	w.deleted[name] = true
	for uid, p := range w.pins {
		if p.node == name {
			delete(w.pins, uid)
		}
	}
	if last == nil || oracle.Read(last)&oracle.UnfinishedGrant == 0 {
		return
	}
	w.departed[name] = &departure{node: last, at: w.opts.Now()}
	w.stats.Departures++
	w.opts.Log("watcher: Node %s deleted holding grant %q of pool %q: counted until a Node of its name serves",
		name, last.Annotations[keyGrant], last.Annotations[keyGrantPool])
}

// returned forgets the departure of cur's name once cur serves (Ready, no
// DiskPressure, NetworkUnavailable or nodeward health condition True) and
// carries its agent's report: a kubelet turns the new Node Ready before the
// machine's agent says whether it is still mid-update under the departed
// grant.
func (w *Watcher) returned(cur *corev1.Node) {
	d := w.departed[cur.Name]
	if d == nil || oracle.Read(cur)&(oracle.NotReady|oracle.Unhealthy) != 0 || cur.Annotations[keyState] == "" {
		return
	}
	delete(w.departed, cur.Name)
	w.opts.Log("watcher: departed node %s serves again after %s", cur.Name, w.opts.Now().Sub(d.at).Round(time.Millisecond))
}

// departedIn reports whether the departure d counts in pool p: the pool
// that issued its grant, or every pool for a grant without grant-pool.
func (d *departure) departedIn(p string) bool {
	gp := d.node.Annotations[keyGrantPool]
	return gp == "" || gp == p
}

// soakingFor reports whether n keeps pool p's slot after Done: it holds a
// grant p issued with soak-until set (a soak, or the last canary's bake),
// until the release removes them.
func soakingFor(n *corev1.Node, p string) bool {
	a := n.Annotations
	return a[keyGrant] != "" && a[keySoakUntil] != "" && a[keyGrantPool] == p
}

// disruptedIn reports whether n counts against pool p's budget.
func disruptedIn(n *corev1.Node, p string) bool {
	return disrupted(n) || soakingFor(n, p)
}

// countedIn returns how many nodes pool p has and those it counts at now:
// the nodes it selects or whose grant it issued, less those relabelled
// into it within the grace when graced is set, and its departed nodes,
// each standing for a Node of its name registered since.
func (w *Watcher) countedIn(p string, now time.Time, graced bool) (int, []*corev1.Node) {
	members := 0
	var counted []*corev1.Node
	for name, r := range w.nodes {
		if w.departed[name] != nil || !r.memberOf(p) {
			continue
		}
		members++
		if joined, ok := r.joined[p]; graced && ok && now.Sub(joined) < w.opts.Grace {
			continue // relabelled in just now: the coordinator may not know yet
		}
		counted = append(counted, r.node)
	}
	for _, d := range w.departed {
		if d.departedIn(p) {
			members++
			counted = append(counted, d.node)
		}
	}
	return members, counted
}

// disruptedAmong returns, sorted, the names of nodes counted against pool
// p, but for skip.
func disruptedAmong(nodes []*corev1.Node, p, skip string) []string {
	var out []string
	for _, n := range nodes {
		if n.Name != skip && disruptedIn(n, p) {
			out = append(out, n.Name)
		}
	}
	slices.Sort(out)
	return out
}

// clusterNodes returns every node the control-plane cap looks at: the
// Nodes seen, a departed node standing for a Node of its name.
func (w *Watcher) clusterNodes() []*corev1.Node {
	nodes := make([]*corev1.Node, 0, len(w.nodes)+len(w.departed))
	for name, r := range w.nodes {
		if w.departed[name] == nil {
			nodes = append(nodes, r.node)
		}
	}
	for _, d := range w.departed {
		nodes = append(nodes, d.node)
	}
	return nodes
}

// lastSeen is the node named name as the watcher counts it (departed or
// seen), nil when unknown.
func (w *Watcher) lastSeen(name string) *corev1.Node {
	if d := w.departed[name]; d != nil {
		return d.node
	}
	if r := w.nodes[name]; r != nil {
		return r.node
	}
	return nil
}

// VGrantOfNoPool: a grant written more than Grace after the pool it names
// (grant-pool) was deleted, and before a pool of that name exists again.
const VGrantOfNoPool = "grant-of-deleted-pool"

// dropPool forgets a deleted pool; its nodes keep its grants until a pool
// of its name, or the one pool selecting them, releases them
// (docs/protocol.md).
func (w *Watcher) dropPool(name string) {
	delete(w.pools, name)
	w.poolGone[name] = w.opts.Now()
	w.trackPolicy(name, nil, true)
}

// grantOfNoPool judges a grant whose pool the watcher does not know: a
// pool deleted more than Grace ago issues none.
func (w *Watcher) grantOfNoPool(cur *corev1.Node, pool, grant string, now time.Time) {
	gone, ok := w.poolGone[pool]
	if !ok || now.Sub(gone) < w.opts.Grace {
		w.opts.Log("watcher: grant %q on %s from pool %q, which the watcher does not know", grant, cur.Name, pool)
		return
	}
	w.record(Violation{At: now, Kind: VGrantOfNoPool, Pool: pool, Nodes: []string{cur.Name},
		Detail: fmt.Sprintf("grant %q written on %s (resourceVersion %s) %s after pool %s was deleted",
			grant, cur.Name, cur.ResourceVersion, now.Sub(gone).Round(time.Millisecond), pool)})
}
