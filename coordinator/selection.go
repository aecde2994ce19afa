package coordinator

import (
	"fmt"
	"slices"
	"strings"

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

// selectors returns the selectors of pools, by pool name. A pool whose
// selector does not parse selects nothing (its own reconcile reports the
// error and grants nothing).
func selectors(pools []*v1alpha1.UpdatePool) []poolSelector {
	var out []poolSelector
	for _, p := range pools {
		s, err := metav1.LabelSelectorAsSelector(p.Spec.NodeSelector)
		if err != nil {
			continue
		}
		out = append(out, poolSelector{name: p.Name, target: p.Spec.OSImage, sel: s})
	}
	slices.SortFunc(out, func(a, b poolSelector) int { return strings.Compare(a.name, b.name) })
	return out
}

// poolSet is what one pass of a pool reads of every pool: their selectors,
// which exist, and the planned pool's name and canary selector. key names
// all of it, so that a selection made under the same key holds.
type poolSet struct {
	planned string
	sels    []poolSelector
	exists  map[string]bool
	canary  labels.Selector
	key     string
}

// newPoolSet gathers the pools as pool's pass sees them; an error names
// the planned pool's selector that does not parse.
func newPoolSet(pool *v1alpha1.UpdatePool, pools []*v1alpha1.UpdatePool) (*poolSet, error) {
	if _, err := metav1.LabelSelectorAsSelector(pool.Spec.NodeSelector); err != nil {
		return nil, fmt.Errorf("pool %s nodeSelector: %w", pool.Name, err)
	}
	s := &poolSet{planned: pool.Name, sels: selectors(pools), exists: map[string]bool{}}
	if c := pool.Spec.Canary; c != nil && c.Selector != nil {
		sel, err := metav1.LabelSelectorAsSelector(c.Selector)
		if err != nil {
			return nil, fmt.Errorf("pool %s canary.selector: %w", pool.Name, err)
		}
		s.canary = sel
	}
	var key strings.Builder
	key.WriteString(pool.Name)
	if s.canary != nil {
		fmt.Fprintf(&key, "\x00canary=%s", s.canary)
	}
	for _, p := range s.sels {
		s.exists[p.name] = true
		fmt.Fprintf(&key, "\x00%s\x01%s\x01%s", p.name, p.target, p.sel)
	}
	s.key = key.String()
	return s, nil
}

// selection is what the pools make of one node, from its labels and its
// grant-pool annotation: the pools that select it, whether the planned
// pool is one, the pool that releases its grant, whether it holds one,
// whether it is a control-plane node and one of the planned pool's
// canaries.
type selection struct {
	matched      []poolSelector
	selected     bool
	owner        string
	granted      bool
	controlPlane bool
	canary       bool
}

// selectNode is n's selection, its matched pools appended to buf[:0].
func (s *poolSet) selectNode(n *corev1.Node, buf []poolSelector) selection {
	set := labels.Set(n.Labels)
	out := selection{matched: buf[:0], controlPlane: isControlPlane(n)}
	for _, p := range s.sels {
		if p.sel.Matches(set) {
			out.matched = append(out.matched, p)
			out.selected = out.selected || p.name == s.planned
		}
	}
	out.owner = grantOwner(n, out.matched, s.exists)
	out.granted = n.Annotations[v1alpha1.AnnotationGrant] != ""
	out.canary = s.canary != nil && s.canary.Matches(set)
	return out
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
