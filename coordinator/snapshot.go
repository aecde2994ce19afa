package coordinator

import (
	"fmt"
	"iter"
	"sort"
	"time"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime"

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

// input builds pool's plan input from the node index. The caller copies
// the expectations (pending) BEFORE input reads the index: a node event
// delivered in between then finds the grant either in the copy or in the
// index, never in neither (nodeIndex).
//
// It also returns the pool's nodes whose agent is silent.
func (c *Controller) input(pool *v1alpha1.UpdatePool, pending map[string]bool, now time.Time) (in planInput, silent []*corev1.Node, err error) {
	views := c.views.pass(pool.Name)
	pools, backoff := c.cachedPools(), c.backoff.active(now)
	c.index.read(views.slot, now, func(nodes iter.Seq[listedNode]) {
		in, silent, err = buildInputWith(views, c.machines, pool, pools, nodes, pending, backoff, now)
	})
	views.done(in.nodes)
	if err != nil {
		return in, silent, err
	}
	// After the index (departures: ordering).
	remembered := withRecorded(c.departures.all(), recordedDepartures(pools, c.index.node))
	err = countDepartures(&in, pool, pools, remembered, departureEnded(c.index.node, in.machines))
	return in, silent, err
}

// buildInput is input over given pools and nodes: the whole of what a plan
// reads, with no index, cache or API behind it (Decide, the protocol
// simulator); machines nil for none.
func buildInput(pool *v1alpha1.UpdatePool, pools []*v1alpha1.UpdatePool, nodes []*corev1.Node, machines *machineIndex,
	agentAlive func(string) bool, pending, backoff map[string]bool, now time.Time) (planInput, []*corev1.Node, error) {
	return buildInputWith(nil, machines, pool, pools, listNodes(nodes, agentAlive), pending, backoff, now)
}

// buildInputWith is buildInput over listed nodes, each with its cached
// selection and view (or none), in the buffer of the pool's cached views
// (nil: none). A node's object is read only where its cached selection or
// view no longer holds, and for control-plane nodes. With views, pool's
// target is replaced by the last pass's when equal (interned).
func buildInputWith(views *poolViews, machines *machineIndex, pool *v1alpha1.UpdatePool, pools []*v1alpha1.UpdatePool,
	nodes iter.Seq[listedNode], pending, backoff map[string]bool, now time.Time) (planInput, []*corev1.Node, error) {
	var buf []nodeView
	if views != nil {
		buf = views.buf
		pool.Spec.OSImage = interned(&views.target, pool.Spec.OSImage)
	}
	mv := machines.view()
	in := planInput{pool: pool, pending: pending, backoff: backoff, now: now, nodes: buf[:0], machines: mv}
	set, err := newPoolSet(pool, pools)
	if err != nil {
		return in, nil, err
	}
	if views != nil {
		set.key = interned(&views.key, set.key)
	}
	var silent []*corev1.Node
	var busy []string // unavailable control-plane nodes, "name (why)"
	var matched []poolSelector
	for l := range nodes {
		sel := l.cache.selection(l.node, l.rv, set, matched)
		matched = sel.matched
		machine := mv.byNode[l.name]
		if sel.controlPlane {
			if down, why := controlPlaneDown(l.node, sel.matched, pending, l.leaseOK, machine); down {
				busy = append(busy, l.node.Name+" ("+why+")")
			} else if kept, why := controlPlaneSlotKept(l.node, sel); kept {
				if in.controlPlaneSlots == nil {
					in.controlPlaneSlots = map[string]string{}
				}
				in.controlPlaneSlots[l.node.Name] = why
			}
		}
		if !sel.selected && (sel.owner != pool.Name || !sel.granted) {
			continue
		}
		v := l.cache.viewOf(l.node, l.rv, l.leaseOK, pool.Spec.OSImage, machine)
		v.name, v.machine = l.name, mv.keys[l.name]
		v.selected, v.shared, v.owner, v.canary = sel.selected, len(sel.matched) > 1, sel.owner, sel.canary
		in.nodes = append(in.nodes, v)
		if sel.selected && !l.leaseOK {
			silent = append(silent, l.node)
		}
	}
	if len(busy) > 0 {
		sort.Strings(busy)
		in.controlPlaneBusy = "control-plane node " + busy[0] + " is unavailable: one control-plane node at a time, cluster-wide"
	} else if mv.controlPlane != "" {
		in.controlPlaneBusy = mv.controlPlane
	}
	return in, silent, nil
}

// controlPlaneDown reports whether a control-plane node counts against the
// cluster-wide limit of one: a grant written but not observed, or
// v1alpha1.Unavailable for the target of any pool selecting it (its own
// target annotation when none does), a finished grant ignored.
func controlPlaneDown(n *corev1.Node, matched []poolSelector, pending map[string]bool, leaseOK bool, machine string) (bool, string) {
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
		if down, why := viewNode(n, leaseOK, t, machine).unavailable(); down {
			return true, why
		}
	}
	return false, ""
}

// controlPlaneSlotKept reports whether a control-plane node that
// controlPlaneDown does not count still keeps the slot of a grant it
// finished: soaking after Done (or baking as the last canary), or not yet
// released by its pool. It counts against the cluster-wide limit of one
// until its slot is given back: the soak watches the cluster with that node
// updated before the next control-plane node is touched. A grant no pool
// would release (its pool deleted, no pool selecting the node) is not
// waited for: it would hold every control-plane node forever.
func controlPlaneSlotKept(n *corev1.Node, sel selection) (bool, string) {
	a := n.Annotations
	switch {
	case a[v1alpha1.AnnotationGrant] == "" || (sel.owner == "" && len(sel.matched) == 0):
		return false, ""
	case a[v1alpha1.AnnotationSoakUntil] != "":
		return true, "soaking after its update until " + a[v1alpha1.AnnotationSoakUntil]
	}
	return true, "finished its update, slot not yet released"
}

func (c *Controller) pool(key string) (*v1alpha1.UpdatePool, error) {
	obj, exists, err := c.pools.GetStore().GetByKey(key)
	if err != nil || !exists {
		return nil, err
	}
	var pool v1alpha1.UpdatePool
	if err := runtime.DefaultUnstructuredConverter.FromUnstructured(obj.(*unstructured.Unstructured).Object, &pool); err != nil {
		return nil, fmt.Errorf("decode UpdatePool %s: %w", key, err)
	}
	return &pool, nil
}
