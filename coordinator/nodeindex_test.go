package coordinator

import (
	"fmt"
	"iter"
	"math/rand/v2"
	"slices"
	"testing"
	"time"

	coordinationv1 "k8s.io/api/coordination/v1"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/tools/cache"

	"github.com/nodeward/nodeward/api/v1alpha1"
)

// TestNodeIndexFollowsEvents: through random adds, updates, deletes (some
// seen only as tombstones) and Lease renewals and deletes, the index lists
// exactly the nodes the events leave, each at its latest version with its
// agent's liveness, keeps no entry for a name with neither a Node nor a
// renewed Lease, and runs each event's callback only once it holds the
// event.
func TestNodeIndexFollowsEvents(t *testing.T) {
	t.Parallel()
	now := time.Date(2026, 11, 25, 12, 0, 0, 0, time.UTC)
	index := newNodeIndex()
	nodes := map[string]*corev1.Node{} // what the events leave
	alive := map[string]bool{}
	h := index.nodeHandler(nil, func(old, cur *corev1.Node) {
		switch {
		case cur != nil && index.node(cur.Name) != cur:
			t.Errorf("the callback of %s ran before the index held it", cur.Name)
		case cur == nil && index.node(old.Name) != nil:
			t.Errorf("the callback of the delete of %s ran while the index still held it", old.Name)
		}
	})
	lh := index.leaseHandler(func(_, _ *coordinationv1.Lease) {})
	lease := func(node string, renewed bool) *coordinationv1.Lease {
		l := &coordinationv1.Lease{ObjectMeta: metav1.ObjectMeta{Name: v1alpha1.AgentLeaseName(node)}}
		if renewed {
			l.Spec.RenewTime = &metav1.MicroTime{Time: now}
		}
		return l
	}
	rng := rand.New(rand.NewPCG(1, 2))
	for step := range 3000 {
		name := fmt.Sprintf("n%d", rng.IntN(12))
		switch op := rng.IntN(6); {
		case op <= 1: // add or update
			n := &corev1.Node{ObjectMeta: metav1.ObjectMeta{Name: name, ResourceVersion: fmt.Sprint(step)}}
			if old, ok := nodes[name]; ok {
				h.OnUpdate(old, n)
			} else {
				h.OnAdd(n, false)
			}
			nodes[name] = n
		case op == 2: // delete
			if old, ok := nodes[name]; ok {
				if rng.IntN(2) == 0 {
					h.OnDelete(cache.DeletedFinalStateUnknown{Key: name, Obj: old})
				} else {
					h.OnDelete(old)
				}
				delete(nodes, name)
			}
		case op == 3:
			lh.OnAdd(lease(name, true), false)
			alive[name] = true
		case op == 4:
			lh.OnUpdate(lease(name, true), lease(name, false))
			delete(alive, name)
		default:
			lh.OnDelete(lease(name, true))
			delete(alive, name)
		}
		var listed []string
		index.read(0, now.Add(-time.Second), func(seq iter.Seq[listedNode]) {
			for l := range seq {
				listed = append(listed, l.node.Name)
				if l.node != nodes[l.node.Name] || l.rv != l.node.ResourceVersion {
					t.Fatalf("step %d: %s listed at version %q, its latest is %v", step, l.node.Name, l.rv, nodes[l.node.Name])
				}
				if l.leaseOK != alive[l.node.Name] {
					t.Fatalf("step %d: %s alive %v, want %v", step, l.node.Name, l.leaseOK, alive[l.node.Name])
				}
				if l.cache == nil {
					t.Fatalf("step %d: %s listed without its cached views", step, l.node.Name)
				}
			}
		})
		slices.Sort(listed)
		want := slices.Sorted(func(yield func(string) bool) {
			for n := range nodes {
				if !yield(n) {
					return
				}
			}
		})
		if !slices.Equal(listed, want) {
			t.Fatalf("step %d: listed %v, want %v", step, listed, want)
		}
		for name, e := range index.byName {
			if _, isNode := nodes[name]; !isNode && !alive[name] {
				t.Fatalf("step %d: an entry is left for %s, with neither a Node nor a renewed Lease", step, name)
			}
			if e.slot >= 0 && index.listed[e.slot] != e {
				t.Fatalf("step %d: %s's slot %d holds another entry", step, name, e.slot)
			}
		}
	}
}
