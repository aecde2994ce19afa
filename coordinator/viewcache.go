package coordinator

import (
	"sync"

	corev1 "k8s.io/api/core/v1"
)

// viewCache keeps each pool's node views and selections from one pass to
// the next. A view is rebuilt only when its node changed
// (resourceVersion), its agent's liveness flipped, or the pool's target
// changed; a selection (which pools select the node, whose grant it is,
// whether it is a control-plane node or a canary) only when its node
// changed or any pool's selector, target or canary selector did. Between
// two passes one or two nodes change; rebuilding every view (a dozen
// annotation lookups and the availability rules per node) and matching
// every node's labels against every pool were most of a pass at 10,000
// nodes (docs/benchmarks.md).
type viewCache struct {
	mu    sync.Mutex
	pools map[string]*poolViews
}

// poolViews are one pool's cached views and selections, by node; pass
// counts the pool's passes. buf is the slice the last pass's input was
// built in, reused by the next (3.6 MB at 10,000 nodes, which each pass
// otherwise allocated and the garbage collector scanned).
type poolViews struct {
	pass  uint64
	nodes map[string]*cachedNode
	buf   []nodeView
}

// cachedNode is one node's view and selection, each with what it was built
// from, and the pass that last saw the node. One entry holds both, so that
// a pass looks each node up once.
type cachedNode struct {
	seen uint64

	hasView bool
	viewRV  string
	leaseOK bool
	target  string
	view    nodeView

	hasSelection bool
	selectionRV  string
	pools        string // the poolSet.key the selection was made under
	sel          selection
}

func newViewCache() *viewCache { return &viewCache{pools: map[string]*poolViews{}} }

// viewPass is one plan pass over a pool's cached views and selections. A
// nil *viewPass caches nothing: its views and selections are built afresh
// (buildInput: Decide, the protocol simulator).
type viewPass struct {
	p    *poolViews
	seen int
}

// pass starts a pass of pool. Passes of one pool must not overlap, nor
// outlive the next one's start (the controller has one worker, and nothing
// keeps a plan's input); done ends it.
func (c *viewCache) pass(pool string) *viewPass {
	c.mu.Lock()
	p := c.pools[pool]
	if p == nil {
		p = &poolViews{nodes: map[string]*cachedNode{}}
		c.pools[pool] = p
	}
	c.mu.Unlock()
	p.pass++
	return &viewPass{p: p}
}

// buf is the slice to build the pass's input in: empty, with the capacity
// of the last pass's.
func (ps *viewPass) buf() []nodeView {
	if ps == nil {
		return nil
	}
	return ps.p.buf
}

// node is n's entry, marked seen by this pass (nil without a cache).
func (ps *viewPass) node(n *corev1.Node) *cachedNode {
	if ps == nil {
		return nil
	}
	p := ps.p
	ps.seen++
	e := p.nodes[n.Name]
	if e == nil {
		e = &cachedNode{}
		p.nodes[n.Name] = e
	}
	e.seen = p.pass
	return e
}

// selection is n's selection by pools, from its entry e. Without a cache
// (e nil) its matched pools are appended to buf[:0]; a cached selection's
// are its own, and buf is not used.
func (ps *viewPass) selection(e *cachedNode, n *corev1.Node, pools *poolSet, buf []poolSelector) selection {
	if e == nil {
		return pools.selectNode(n, buf)
	}
	if !e.hasSelection || n.ResourceVersion == "" || e.selectionRV != n.ResourceVersion || e.pools != pools.key {
		e.hasSelection, e.selectionRV, e.pools, e.sel = true, n.ResourceVersion, pools.key, pools.selectNode(n, nil)
	}
	return e.sel
}

// view is n's view, from its entry e, for an agent alive or not and the
// pool's target.
func (ps *viewPass) view(e *cachedNode, n *corev1.Node, leaseOK bool, target string) nodeView {
	if e == nil {
		return viewNode(n, leaseOK, target)
	}
	if !e.hasView || n.ResourceVersion == "" || e.viewRV != n.ResourceVersion || e.leaseOK != leaseOK || e.target != target {
		e.hasView, e.viewRV, e.leaseOK, e.target, e.view = true, n.ResourceVersion, leaseOK, target, viewNode(n, leaseOK, target)
	}
	return e.view
}

// done ends the pass: the entries of nodes it did not see (deleted, no
// longer listed) are dropped, and used is kept as the next pass's buffer.
func (ps *viewPass) done(used []nodeView) {
	if ps == nil {
		return
	}
	p := ps.p
	p.buf = used[:0]
	if len(p.nodes) == ps.seen {
		return
	}
	for name, e := range p.nodes {
		if e.seen != p.pass {
			delete(p.nodes, name)
		}
	}
}

// forget drops a deleted pool's views.
func (c *viewCache) forget(pool string) {
	c.mu.Lock()
	delete(c.pools, pool)
	c.mu.Unlock()
}
