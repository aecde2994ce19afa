package protosim

import (
	"fmt"
	"math"
	"strings"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/labels"
	"k8s.io/apimachinery/pkg/util/intstr"

	"github.com/nodeward/nodeward/api/v1alpha1"
	"github.com/nodeward/nodeward/coordinator"
)

// disruptable are the Node objects the disruption checks count: the
// API's, and in extended mode, for a machine whose Node was deleted while
// it was disrupted under a grant, that deleted object until a Node of its
// name serves again (docs/protocol.md: a node deleted mid-update counts
// until its machine is back), across leader changes and pool deletions
// too (the grant records and the pool's finalizer; docs/protocol.md, "What
// the coordinator cannot know").
func (w *World) disruptable() []*corev1.Node {
	out := make([]*corev1.Node, 0, len(w.nodes))
	for name, n := range w.nodes {
		if w.x != nil && w.x.departed[name] != nil {
			continue
		}
		out = append(out, w.countable(n))
	}
	if w.x != nil {
		for _, old := range w.x.departed {
			out = append(out, old)
		}
	}
	return out
}

// failover replaces the coordinator (a crash, a pause): a fresh list, no
// expectations, no departures but what the pools persist and record.
func (w *World) failover() {
	w.coord = newCoordinator(w)
}

// coordinatorHolds reports whether the coordinator remembers the
// departure of name or a pool persists it.
func (w *World) coordinatorHolds(name string) bool {
	_, ok := w.coord.ext.departed[name]
	return ok || w.poolPersists(name)
}

// poolPersists reports whether a pool's departed-nodes or granted-nodes
// annotation names name.
func (w *World) poolPersists(name string) bool {
	for _, p := range w.pools {
		if strings.Contains(p.Annotations[v1alpha1.AnnotationDepartedNodes], `"`+name+`"`) ||
			strings.Contains(p.Annotations[v1alpha1.AnnotationGrantedNodes], `"`+name+`"`) {
			return true
		}
	}
	return false
}

// checkGrantGuardrails runs, in extended mode, when the coordinator
// writes a grant: the pool issuing it exists in the API (the grant was
// confirmed against a quorum read), is neither paused nor halted, and its
// canary holds.
func (w *World) checkGrantGuardrails(wr coordinator.Write) {
	owner := ""
	if v := wr.Set[v1alpha1.AnnotationGrantPool]; v != nil {
		owner = *v
	}
	p := w.pools[owner]
	switch {
	case p == nil:
		w.violate("grant on %s by pool %q, which the API server does not have", wr.Node, owner)
		return
	case p.DeletionTimestamp != nil:
		w.violate("grant on %s by pool %s, which is being deleted", wr.Node, p.Name)
	case p.Spec.Paused:
		w.violate("grant on %s in paused pool %s", wr.Node, p.Name)
	case haltedPool(p):
		w.violate("grant on %s in pool %s, halted: %s", wr.Node, p.Name, p.Annotations[v1alpha1.AnnotationHalted])
	}
	w.checkCanary(p, wr.Node)
}

// haltedPool reports whether p carries a halt for its current target.
func haltedPool(p *v1alpha1.UpdatePool) bool {
	config, _, ok := strings.Cut(p.Annotations[v1alpha1.AnnotationHalted], ":")
	return ok && config == coordinator.ConfigName(p.Spec)
}

// checkCanary runs as pool grants node: while the canary has not baked,
// no other node of the pool holds a grant for the target (one canary at a
// time), and with a selector only a node it selects is granted, and a
// selector that selects none of the pool's nodes grants nothing.
//
// A canary counts as baked once it runs the target (Done for it) and
// either holds no grant any more or holds one whose soak-until has passed
// (the pass that ends the last bake grants at full maxUnavailable before
// it writes the release). A node that ran the target before the canary
// was set counts as baked too: the check is lenient where the product's
// count (canaryDone) depends on grant history.
func (w *World) checkCanary(p *v1alpha1.UpdatePool, node string) {
	c := p.Spec.Canary
	if c == nil || p.Spec.OSImage == "" {
		return
	}
	members := w.poolMembers(p)
	target := p.Spec.OSImage
	var holding []string
	baked := 0
	for _, m := range members {
		if canaryBaked(m, target, w.now) {
			baked++
		}
	}
	for _, m := range w.nodes {
		a := w.countable(m).Annotations // a deposed leader's grant no agent took holds nothing
		if m.Name != node && a[v1alpha1.AnnotationGrant] != "" && a[v1alpha1.AnnotationGrantPool] == p.Name &&
			a[v1alpha1.AnnotationGrantTarget] == target && !canaryBaked(m, target, w.now) && !yieldedGrant(a) {
			holding = append(holding, m.Name)
		}
	}
	if c.Selector != nil {
		w.checkCanarySelector(p, node, members, holding)
		return
	}
	if k := canaryCount(c.Nodes, len(members)); baked < k && len(holding) > 0 {
		w.violate("canary pool %s granted %s while %v hold grants for %s and %d of %d canaries baked",
			p.Name, node, holding, target, baked, k)
	}
}

// yieldedGrant reports whether the agent gave the node's grant back
// (Yielded for it): the node never started the update, so it is no canary
// in progress, only a grant the coordinator has yet to remove.
func yieldedGrant(a map[string]string) bool {
	return a[v1alpha1.AnnotationStateGrant] == a[v1alpha1.AnnotationGrant] &&
		v1alpha1.Step(a[v1alpha1.AnnotationState]) == v1alpha1.StepYielded
}

// checkCanarySelector is checkCanary for a canary selector.
func (w *World) checkCanarySelector(p *v1alpha1.UpdatePool, node string, members []*corev1.Node, holding []string) {
	sel, err := metav1.LabelSelectorAsSelector(p.Spec.Canary.Selector)
	if err != nil {
		return
	}
	matched, active, nodeMatches := 0, false, false
	for _, m := range members {
		if !sel.Matches(labels.Set(m.Labels)) {
			continue
		}
		matched++
		nodeMatches = nodeMatches || m.Name == node
		if !updatedTo(m, p.Spec.OSImage) {
			active = true
		}
	}
	switch {
	case matched == 0:
		w.violate("canary pool %s granted %s although its canary selector %s selects none of its nodes",
			p.Name, node, metav1.FormatLabelSelector(p.Spec.Canary.Selector))
	case active && !nodeMatches:
		w.violate("canary pool %s granted %s, which its canary selector does not select, before its canaries baked", p.Name, node)
	case active && len(holding) > 0:
		w.violate("canary pool %s granted %s while %v hold grants before its canaries baked", p.Name, node, holding)
	}
}

// updatedTo reports whether n's agent settled on target (Idle or Done).
func updatedTo(n *corev1.Node, target string) bool {
	a := n.Annotations
	return a[v1alpha1.AnnotationStateTarget] == target && v1alpha1.Step(a[v1alpha1.AnnotationState]).Settled()
}

// canaryBaked: n runs target and its bake is over (see checkCanary).
func canaryBaked(n *corev1.Node, target string, now time.Time) bool {
	a := n.Annotations
	if a[v1alpha1.AnnotationStateTarget] != target || v1alpha1.Step(a[v1alpha1.AnnotationState]) != v1alpha1.StepDone {
		return false
	}
	if a[v1alpha1.AnnotationGrant] == "" {
		return true
	}
	until, err := time.Parse(time.RFC3339, a[v1alpha1.AnnotationSoakUntil])
	return err == nil && !now.Before(until)
}

// canaryCount resolves canary.nodes over the pool's nodes (1 when unset).
func canaryCount(v *intstr.IntOrString, members int) int {
	switch {
	case v == nil:
		return 1
	case v.Type == intstr.Int:
		return int(v.IntVal)
	}
	p, err := intstr.GetScaledValueFromIntOrPercent(v, 100, true)
	if err != nil {
		return 1
	}
	return max(1, int(math.Ceil(float64(members)*float64(p)/100)))
}

// departedNote says, in extended mode, which of nodes count as disrupted
// only because their Node was deleted under a grant, and whether the
// coordinator knew: a departure remembered, or persisted on a pool.
func (w *World) departedNote(nodes []string) string {
	if w.x == nil {
		return ""
	}
	note := ""
	for _, name := range nodes {
		if w.x.departed[name] == nil {
			continue
		}
		note += fmt.Sprintf(" (Node of %s deleted under its grant; the coordinator holds its departure: %v)", name, w.coordinatorHolds(name))
	}
	return note
}
