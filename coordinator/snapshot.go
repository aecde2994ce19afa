package coordinator

import (
	"sort"
	"time"

	corev1 "k8s.io/api/core/v1"

	"github.com/nodeward/nodeward/api/v1alpha1"
)

// cachedPools are the pools in the cache.
func (c *Controller) cachedPools() []*v1alpha1.UpdatePool {
	var out []*v1alpha1.UpdatePool
	for _, key := range c.pools.GetStore().ListKeys() {
		if p, err := c.pool(key); err == nil && p != nil {
			out = append(out, p)
		}
	}
	return out
}

// cachedNodes are the nodes in the cache.
func (c *Controller) cachedNodes() []*corev1.Node {
	objs := c.nodes.GetStore().List()
	out := make([]*corev1.Node, 0, len(objs))
	for _, obj := range objs {
		out = append(out, obj.(*corev1.Node))
	}
	return out
}

// input builds pool's plan input from the caches. The caller copies the
// expectations (pending) BEFORE input lists the nodes: a node event
// delivered in between then finds the grant either in the copy or in the
// list, never in neither.
//
// It also returns the pool's nodes whose agent is silent.
func (c *Controller) input(pool *v1alpha1.UpdatePool, pending map[string]bool, now time.Time) (planInput, []*corev1.Node, error) {
	pass := c.views.pass(pool.Name)
	in, silent, err := buildInputWith(pass, pool, c.cachedPools(), c.cachedNodes(), func(node string) bool { return c.expiries.alive(node, now) },
		pending, c.backingOff(now), now)
	pass.done(in.nodes)
	return in, silent, err
}

// buildInput is input over given pools and nodes: the whole of what a plan
// reads, with no cache or API behind it (Decide, the protocol simulator).
func buildInput(pool *v1alpha1.UpdatePool, pools []*v1alpha1.UpdatePool, nodes []*corev1.Node, agentAlive func(string) bool,
	pending, backoff map[string]bool, now time.Time) (planInput, []*corev1.Node, error) {
	return buildInputWith(nil, pool, pools, nodes, agentAlive, pending, backoff, now)
}

// buildInputWith is buildInput with the nodes' selections and views from
// a viewCache's pass (nil: built afresh), in the pass's buffer when it is
// large enough.
func buildInputWith(pass *viewPass, pool *v1alpha1.UpdatePool, pools []*v1alpha1.UpdatePool,
	nodes []*corev1.Node, agentAlive func(string) bool, pending, backoff map[string]bool, now time.Time) (planInput, []*corev1.Node, error) {
	buf := pass.buf()
	if cap(buf) < len(nodes) {
		buf = make([]nodeView, 0, len(nodes))
	}
	in := planInput{pool: pool, pending: pending, backoff: backoff, now: now, nodes: buf[:0]}
	set, err := newPoolSet(pool, pools)
	if err != nil {
		return in, nil, err
	}
	var silent []*corev1.Node
	var busy []string // unavailable control-plane nodes, "name (why)"
	var matched []poolSelector
	for _, n := range nodes {
		e := pass.node(n)
		sel := pass.selection(e, n, set, matched)
		matched = sel.matched
		leaseOK := agentAlive(n.Name)
		if sel.controlPlane {
			if down, why := controlPlaneDown(n, sel.matched, pending, leaseOK); down {
				busy = append(busy, n.Name+" ("+why+")")
			}
		}
		if !sel.selected && (sel.owner != pool.Name || n.Annotations[v1alpha1.AnnotationGrant] == "") {
			continue
		}
		v := pass.view(e, n, leaseOK, pool.Spec.OSImage)
		v.selected, v.shared, v.owner, v.canary = sel.selected, len(sel.matched) > 1, sel.owner, sel.canary
		in.nodes = append(in.nodes, v)
		if sel.selected && !leaseOK {
			silent = append(silent, n)
		}
	}
	if len(busy) > 0 {
		sort.Strings(busy)
		in.controlPlaneBusy = "control-plane node " + busy[0] + " is unavailable: one control-plane node at a time, cluster-wide"
	}
	return in, silent, nil
}

// controlPlaneDown reports whether a control-plane node counts against the
// cluster-wide limit of one: a grant written but not observed, or
// v1alpha1.Unavailable for the target of any pool selecting it (its own
// target annotation when none does), a finished grant ignored.
func controlPlaneDown(n *corev1.Node, matched []poolSelector, pending map[string]bool, leaseOK bool) (bool, string) {
	if pending[n.Name] {
		return true, "updating (grant not yet observed)"
	}
	targets := make([]string, 0, max(len(matched), 1))
	for _, s := range matched {
		targets = append(targets, s.target)
	}
	if len(targets) == 0 {
		targets = append(targets, n.Annotations[v1alpha1.AnnotationTarget])
	}
	for _, t := range targets {
		if down, why := viewNode(n, leaseOK, t).unavailable(); down {
			return true, why
		}
	}
	return false, ""
}
