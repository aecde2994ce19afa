package coordinator

import (
	"sync"

	corev1 "k8s.io/api/core/v1"
)

// viewCache numbers the pools whose node views and selections the node
// index keeps between passes, and keeps each pool's input buffer. A view is
// rebuilt only when its node changed (resourceVersion), its agent's
// liveness flipped, or the pool's target changed; a selection (which pools
// select the node, whose grant it is, whether it is a control-plane node
// or a canary) only when its node changed or any pool's selector, target or
// canary selector did. Between two passes one or two nodes change;
// rebuilding every view (a dozen annotation lookups and the availability
// rules per node) and matching every node's labels against every pool
// were most of a pass at 10,000 nodes (docs/benchmarks.md).
type viewCache struct {
	mu    sync.Mutex
	pools map[string]*poolViews
	// free are the slots of deleted pools, for the next new pool. What a
	// slot still caches is safe to inherit: a view depends on nothing but
	// the node's resourceVersion, its liveness and the target, which the
	// cache compares, and a selection's key names the planned pool.
	free []int
	next int
}

// poolViews is one pool's slot in every node's entry of the index, and the
// slice the pool's last pass built its input in, reused by the next (3.6
// MB at 10,000 nodes, which each pass otherwise allocated and the garbage
// collector scanned).
type poolViews struct {
	slot int
	buf  []nodeView
	// key and target are the poolSet key and the target of the pool's
	// last pass, shared by the next while equal (interned).
	key, target string
}

// interned returns s, or *last when it equals s, and keeps it in *last.
// The cached views and selections keep the key and the target they were
// built under, and each pass compares them per node: with the strings
// shared the comparison is a pointer's, not a walk of the bytes of a
// freshly decoded pool (a fifth of a pass at 10,000 nodes, profiled).
func interned(last *string, s string) string {
	if *last != s {
		*last = s
	}
	return *last
}

// cachedNode is one pool's view and selection of one node, each with what
// it was built from.
type cachedNode struct {
	hasView bool
	viewRV  string
	leaseOK bool
	target  string
	machine string // the node's Machine problem the view was built with
	view    nodeView

	hasSelection bool
	selectionRV  string
	pools        string // the poolSet.key the selection was made under
	sel          selection
}

func newViewCache() *viewCache { return &viewCache{pools: map[string]*poolViews{}} }

// pass returns pool's slot and buffer for a pass. Passes of one pool must
// not overlap, nor outlive the next one's start (the controller has one
// worker, and nothing keeps a plan's input); done ends it.
func (c *viewCache) pass(pool string) *poolViews {
	c.mu.Lock()
	defer c.mu.Unlock()
	p := c.pools[pool]
	if p == nil {
		p = &poolViews{slot: c.next}
		if n := len(c.free); n > 0 {
			p.slot, c.free = c.free[n-1], c.free[:n-1]
		} else {
			c.next++
		}
		c.pools[pool] = p
	}
	return p
}

// done keeps used as the next pass's buffer.
func (p *poolViews) done(used []nodeView) { p.buf = used[:0] }

// forget frees a deleted pool's slot.
func (c *viewCache) forget(pool string) {
	c.mu.Lock()
	defer c.mu.Unlock()
	if p := c.pools[pool]; p != nil {
		delete(c.pools, pool)
		c.free = append(c.free, p.slot)
	}
}

// selection is the node's selection by pools, from its cached entry e.
// Without a cache (e nil) its matched pools are appended to buf[:0]; a
// cached selection's are its own, and buf is not used. n is read only when
// the selection is built afresh.
func (e *cachedNode) selection(n *corev1.Node, rv string, pools *poolSet, buf []poolSelector) selection {
	if e == nil {
		return pools.selectNode(n, buf)
	}
	if !e.hasSelection || rv == "" || e.selectionRV != rv || e.pools != pools.key {
		e.hasSelection, e.selectionRV, e.pools, e.sel = true, rv, pools.key, pools.selectNode(n, nil)
	}
	return e.sel
}

// viewOf is the node's view for an agent alive or not and the pool's
// target, from its cached entry e (nil: built afresh). n is read only when
// the view is built afresh.
func (e *cachedNode) viewOf(n *corev1.Node, rv string, leaseOK bool, target, machine string) nodeView {
	if e == nil {
		return viewNode(n, leaseOK, target, machine)
	}
	if !e.hasView || rv == "" || e.viewRV != rv || e.leaseOK != leaseOK || e.target != target || e.machine != machine {
		v := viewNode(n, leaseOK, target, machine)
		// The plan compares these with the target, per node per pass:
		// sharing the target's bytes makes an equal one a pointer
		// comparison.
		for _, s := range []*string{&v.target, &v.stateTgt, &v.staged, &v.grantTarget} {
			if *s == target {
				*s = target
			}
		}
		e.hasView, e.viewRV, e.leaseOK, e.target, e.machine, e.view = true, rv, leaseOK, target, machine, v
	}
	return e.view
}
