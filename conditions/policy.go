package conditions

import (
	"context"
	"slices"

	corev1 "k8s.io/api/core/v1"
)

// DisruptionGuard says whether a NoExecute taint, which evicts pods, may be
// applied to node (the freshest copy the publisher has) now. The coordinator provides the real guard (it keeps
// evictions within the pool's disruption budget); without one, NoExecute
// is never written.
type DisruptionGuard func(ctx context.Context, node *corev1.Node, taint corev1.Taint) bool

// TaintTable is the policy table: which taint each True condition puts on
// the node. nodeward owns every taint whose key appears in the table and no
// other.
type TaintTable struct {
	rows []TaintPolicy
}

// NewTaintTable takes validated rows (Config.Validate checks them).
func NewTaintTable(rows []TaintPolicy) TaintTable {
	return TaintTable{rows: slices.Clone(rows)}
}

// Owns reports whether taint is nodeward's to add and remove.
func (t TaintTable) Owns(taint corev1.Taint) bool {
	for _, r := range t.rows {
		if r.Key == taint.Key {
			return true
		}
	}
	return false
}

// Desired lists the taints the conditions call for: one per row whose
// condition is True. Unknown never taints: not knowing is no pressure.
func (t TaintTable) Desired(conds []Condition) []corev1.Taint {
	var out []corev1.Taint
	for _, r := range t.rows {
		for _, c := range conds {
			if c.Type == r.Condition && c.Status == corev1.ConditionTrue {
				out = append(out, r.Taint())
			}
		}
	}
	return out
}

// Merge returns current with nodeward's taints replaced by desired; taints
// nodeward does not own keep their place and content. changed is false when
// the result equals current (order included), so no write is needed.
func (t TaintTable) Merge(current, desired []corev1.Taint) (merged []corev1.Taint, changed bool) {
	merged = make([]corev1.Taint, 0, len(current)+len(desired))
	for _, c := range current {
		if !t.Owns(c) {
			merged = append(merged, c)
			continue
		}
		if i := indexTaint(desired, c); i >= 0 {
			merged = append(merged, c) // keep its TimeAdded
		}
	}
	for _, d := range desired {
		if indexTaint(merged, d) < 0 {
			merged = append(merged, d)
		}
	}
	return merged, !slices.EqualFunc(current, merged, func(a, b corev1.Taint) bool {
		return a.Key == b.Key && a.Value == b.Value && a.Effect == b.Effect
	})
}

func indexTaint(list []corev1.Taint, t corev1.Taint) int {
	return slices.IndexFunc(list, func(x corev1.Taint) bool {
		return x.Key == t.Key && x.Value == t.Value && x.Effect == t.Effect
	})
}
