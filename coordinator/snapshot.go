package coordinator

import (
	"fmt"
	"sort"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/labels"

	"github.com/nodeward/nodeward/api/v1alpha1"
)

// poolSelector is one pool's node selector and target.
type poolSelector struct {
	name   string
	target string
	sel    labels.Selector
}

// selectors returns the selectors of pools. A pool whose selector does not
// parse selects nothing (its own reconcile reports the error and grants
// nothing).
func selectors(pools []*v1alpha1.UpdatePool) []poolSelector {
	var out []poolSelector
	for _, p := range pools {
		s, err := metav1.LabelSelectorAsSelector(p.Spec.NodeSelector)
		if err != nil {
			continue
		}
		out = append(out, poolSelector{name: p.Name, target: p.Spec.OSImage, sel: s})
	}
	return out
}

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
	view, buf, done := c.views.pass(pool.Name)
	in, silent, err := buildInputWith(view, buf, pool, c.cachedPools(), c.cachedNodes(), func(node string) bool { return c.leaseOK(node, now) },
		pending, c.backingOff(now), now)
	done(in.nodes)
	return in, silent, err
}

// buildInput is input over given pools and nodes: the whole of what a plan
// reads, with no cache or API behind it (Decide, the protocol simulator).
func buildInput(pool *v1alpha1.UpdatePool, pools []*v1alpha1.UpdatePool, nodes []*corev1.Node, agentAlive func(string) bool,
	pending, backoff map[string]bool, now time.Time) (planInput, []*corev1.Node, error) {
	return buildInputWith(viewNode, nil, pool, pools, nodes, agentAlive, pending, backoff, now)
}

// buildInputWith is buildInput with the nodes' views from view (viewNode,
// or a viewCache's pass), built in buf when it is large enough.
func buildInputWith(view func(*corev1.Node, bool, string) nodeView, buf []nodeView, pool *v1alpha1.UpdatePool, pools []*v1alpha1.UpdatePool,
	nodes []*corev1.Node, agentAlive func(string) bool, pending, backoff map[string]bool, now time.Time) (planInput, []*corev1.Node, error) {
	if cap(buf) < len(nodes) {
		buf = make([]nodeView, 0, len(nodes))
	}
	in := planInput{pool: pool, pending: pending, backoff: backoff, now: now, nodes: buf[:0]}
	if _, err := metav1.LabelSelectorAsSelector(pool.Spec.NodeSelector); err != nil {
		return in, nil, fmt.Errorf("pool %s nodeSelector: %w", pool.Name, err)
	}
	var canary labels.Selector
	if c := pool.Spec.Canary; c != nil && c.Selector != nil {
		sel, err := metav1.LabelSelectorAsSelector(c.Selector)
		if err != nil {
			return in, nil, fmt.Errorf("pool %s canary.selector: %w", pool.Name, err)
		}
		canary = sel
	}
	sels := selectors(pools)
	exists := map[string]bool{}
	for _, s := range sels {
		exists[s.name] = true
	}
	var silent []*corev1.Node
	var busy []string // unavailable control-plane nodes, "name (why)"
	var matched []poolSelector
	for _, n := range nodes {
		set := labels.Set(n.Labels)
		matched = matched[:0]
		selected := false
		for _, s := range sels {
			if s.sel.Matches(set) {
				matched = append(matched, s)
				selected = selected || s.name == pool.Name
			}
		}
		owner := grantOwner(n, matched, exists)
		leaseOK := agentAlive(n.Name)
		if isControlPlane(n) {
			if down, why := controlPlaneDown(n, matched, pending, leaseOK); down {
				busy = append(busy, n.Name+" ("+why+")")
			}
		}
		if !selected && (owner != pool.Name || n.Annotations[v1alpha1.AnnotationGrant] == "") {
			continue
		}
		v := view(n, leaseOK, pool.Spec.OSImage)
		v.selected, v.shared, v.owner = selected, len(matched) > 1, owner
		v.canary = canary != nil && canary.Matches(set)
		in.nodes = append(in.nodes, v)
		if selected && !leaseOK {
			silent = append(silent, n)
		}
	}
	if len(busy) > 0 {
		sort.Strings(busy)
		in.controlPlaneBusy = "control-plane node " + busy[0] + " is unavailable: one control-plane node at a time, cluster-wide"
	}
	return in, silent, nil
}

// grantOwner is the pool that releases node's grant: the pool named by its
// grant-pool annotation while that pool exists, else the one pool that
// selects the node, else "" (unknown: any selecting pool releases a Done or
// Yielded grant).
func grantOwner(n *corev1.Node, matched []poolSelector, exists map[string]bool) string {
	if p := n.Annotations[v1alpha1.AnnotationGrantPool]; p != "" && exists[p] {
		return p
	}
	if len(matched) == 1 {
		return matched[0].name
	}
	return ""
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
