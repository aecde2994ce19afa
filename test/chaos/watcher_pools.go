package chaos

import (
	"fmt"
	"sort"
	"strings"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/labels"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/util/intstr"
	"k8s.io/apimachinery/pkg/watch"

	v1alpha1 "github.com/nodeward/nodeward/api/v1alpha1"
)

// The watcher's view of the UpdatePools: selectors, targets, budgets.

// limitAt is the pool's budget at now: the largest limit in force at any
// moment of the last Grace (a coordinator cannot see a lowered limit
// before its watch delivers it).
func (w *Watcher) limitAt(p *poolRec, members int, now time.Time) int {
	limit := -1
	for i, c := range p.history {
		end := now
		if i+1 < len(p.history) {
			end = p.history[i+1].at
		}
		if end.Before(now.Add(-w.opts.Grace)) {
			continue // superseded before the grace window
		}
		limit = max(limit, budget(c.max, members, p.controlPlane))
	}
	return max(limit, 0)
}

// budget resolves maxUnavailable as the API documents it: a count, or a
// percentage of the pool's nodes rounded down but at least 1; default 1;
// at most 1 in the control-plane pool.
func budget(mu *intstr.IntOrString, members int, controlPlane bool) int {
	limit := 1
	if mu != nil {
		if mu.Type == intstr.Int {
			limit = int(mu.IntVal)
		} else {
			var pct int
			if _, err := fmt.Sscanf(strings.TrimSuffix(mu.StrVal, "%"), "%d", &pct); err == nil {
				limit = max(1, members*pct/100)
			}
		}
	}
	if controlPlane {
		limit = min(limit, 1)
	}
	return limit
}

// poolsOf lists the pools (by name) whose selector matches n.
func (w *Watcher) poolsOf(n *corev1.Node) []string {
	var out []string
	for name, p := range w.pools {
		if p.selector.Matches(labels.Set(n.Labels)) {
			out = append(out, name)
		}
	}
	sort.Strings(out)
	return out
}

func (w *Watcher) replacePools(objs []runtime.Object, gap bool) {
	w.mu.Lock()
	defer w.mu.Unlock()
	seen := map[string]bool{}
	for _, o := range objs {
		if name := w.applyPool(o, gap); name != "" {
			seen[name] = true
		}
	}
	for name := range w.pools {
		if !seen[name] {
			w.dropPool(name)
			w.halts.poolGone(name, 0) // deleted in the gap, at a revision unknown
		}
	}
	w.remember()
}

func (w *Watcher) poolEvent(t watch.EventType, obj runtime.Object) {
	w.mu.Lock()
	defer w.mu.Unlock()
	w.stats.PoolEvents++
	if t == watch.Deleted {
		if u, ok := obj.(*unstructured.Unstructured); ok {
			w.dropPool(u.GetName())
			w.halts.poolGone(u.GetName(), parseRV(u.GetResourceVersion()))
		}
	} else {
		w.applyPool(obj, false)
	}
	w.remember()
}

// applyPool records a pool's selector, target, maxUnavailable history and
// halt; gap: learned from a relist.
func (w *Watcher) applyPool(obj runtime.Object, gap bool) string {
	u, ok := obj.(*unstructured.Unstructured)
	if !ok {
		return ""
	}
	var pool v1alpha1.UpdatePool
	if err := runtime.DefaultUnstructuredConverter.FromUnstructured(u.Object, &pool); err != nil {
		w.opts.Log("watcher: decode pool %s: %v", u.GetName(), err)
		return ""
	}
	sel := labels.Nothing()
	if pool.Spec.NodeSelector != nil {
		s, err := metav1.LabelSelectorAsSelector(pool.Spec.NodeSelector)
		if err != nil {
			w.opts.Log("watcher: pool %s selector: %v", pool.Name, err)
		} else {
			sel = s
		}
	}
	p := w.pools[pool.Name]
	if p == nil {
		p = &poolRec{name: pool.Name}
		w.pools[pool.Name] = p
	}
	p.selector, p.controlPlane, p.target = sel, pool.Spec.ControlPlane, pool.Spec.OSImage
	w.halts.poolHalt(pool.Name, pool.Annotations[keyHalted], parseRV(pool.ResourceVersion), w.opts.Now(), gap)
	w.trackPolicy(pool.Name, &pool, false)
	mu := pool.Spec.MaxUnavailable
	if n := len(p.history); n == 0 || !sameIntStr(p.history[n-1].max, mu) {
		p.history = append(p.history, limitChange{at: w.opts.Now(), max: mu})
	}
	return pool.Name
}

func sameIntStr(a, b *intstr.IntOrString) bool {
	if a == nil || b == nil {
		return a == b
	}
	return *a == *b
}

// remember recomputes every node's pool after a pool change; a pool change
// is not a relabel, so no node gets a grace for it.
func (w *Watcher) remember() {
	for _, r := range w.nodes {
		if r.node != nil {
			r.setPools(w.poolsOf(r.node))
		}
	}
}
