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

// poolViews are one pool's cached views and selections; pass counts the
// pool's passes. buf is the slice the last pass's input was built in,
// reused by the next (3.6 MB at 10,000 nodes, which each pass otherwise
// allocated and the garbage collector scanned).
type poolViews struct {
	pass       uint64
	nodes      map[string]*cachedView
	selections map[string]*cachedSelection
	buf        []nodeView
}

// cachedView is a view with what it was built from and the pass that last
// used it.
type cachedView struct {
	rv      string
	leaseOK bool
	target  string
	seen    uint64
	view    nodeView
}

// cachedSelection is a selection with what it was made from (the node's
// resourceVersion, the pools' poolSet.key) and the pass that last used it.
type cachedSelection struct {
	rv, pools string
	seen      uint64
	sel       selection
}

func newViewCache() *viewCache { return &viewCache{pools: map[string]*poolViews{}} }

// viewPass is one plan pass over a pool's cached views and selections. A
// nil *viewPass caches nothing: its views and selections are built afresh
// (buildInput: Decide, the protocol simulator).
type viewPass struct {
	p                         *poolViews
	seenViews, seenSelections int
}

// pass starts a pass of pool. Passes of one pool must not overlap, nor
// outlive the next one's start (the controller has one worker, and nothing
// keeps a plan's input); done ends it.
func (c *viewCache) pass(pool string) *viewPass {
	c.mu.Lock()
	p := c.pools[pool]
	if p == nil {
		p = &poolViews{nodes: map[string]*cachedView{}, selections: map[string]*cachedSelection{}}
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

// view is n's view for an agent alive or not and the pool's target.
func (ps *viewPass) view(n *corev1.Node, leaseOK bool, target string) nodeView {
	if ps == nil {
		return viewNode(n, leaseOK, target)
	}
	p := ps.p
	ps.seenViews++
	cv := p.nodes[n.Name]
	if cv != nil && n.ResourceVersion != "" && cv.rv == n.ResourceVersion && cv.leaseOK == leaseOK && cv.target == target {
		cv.seen = p.pass
		return cv.view
	}
	cv = &cachedView{rv: n.ResourceVersion, leaseOK: leaseOK, target: target, seen: p.pass, view: viewNode(n, leaseOK, target)}
	p.nodes[n.Name] = cv
	return cv.view
}

// selection is n's selection by pools. Without a cache its matched pools
// are appended to buf[:0]; a cached selection's are its own, and buf is
// not used.
func (ps *viewPass) selection(n *corev1.Node, pools *poolSet, buf []poolSelector) selection {
	if ps == nil {
		return pools.selectNode(n, buf)
	}
	p := ps.p
	ps.seenSelections++
	cs := p.selections[n.Name]
	if cs != nil && n.ResourceVersion != "" && cs.rv == n.ResourceVersion && cs.pools == pools.key {
		cs.seen = p.pass
		return cs.sel
	}
	cs = &cachedSelection{rv: n.ResourceVersion, pools: pools.key, seen: p.pass, sel: pools.selectNode(n, nil)}
	p.selections[n.Name] = cs
	return cs.sel
}

// done ends the pass: the views and selections of nodes it did not see
// (deleted, no longer listed, no longer the pool's) are dropped, and used
// is kept as the next pass's buffer.
func (ps *viewPass) done(used []nodeView) {
	if ps == nil {
		return
	}
	p := ps.p
	p.buf = used[:0]
	if len(p.nodes) != ps.seenViews {
		for name, cv := range p.nodes {
			if cv.seen != p.pass {
				delete(p.nodes, name)
			}
		}
	}
	if len(p.selections) != ps.seenSelections {
		for name, cs := range p.selections {
			if cs.seen != p.pass {
				delete(p.selections, name)
			}
		}
	}
}

// forget drops a deleted pool's views.
func (c *viewCache) forget(pool string) {
	c.mu.Lock()
	delete(c.pools, pool)
	c.mu.Unlock()
}
