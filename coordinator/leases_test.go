package coordinator

import (
	"fmt"
	"slices"
	"testing"
	"time"

	coordinationv1 "k8s.io/api/coordination/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/tools/cache"
	"k8s.io/utils/ptr"

	"github.com/nodeward/nodeward/api/v1alpha1"
)

// TestLeaseExpiriesAgreeWithTheLease: the index kept from the informer's
// events says what leaseAlive says of the Lease itself, at every age
// around the expiry, through updates, a Lease never renewed, a delete and
// a delete seen only as a tombstone; a Lease that is not an agent's is
// ignored.
func TestLeaseExpiriesAgreeWithTheLease(t *testing.T) {
	t.Parallel()
	renewed := time.Date(2026, 11, 25, 12, 0, 0, 500, time.UTC)
	lease := func(name string, renew *time.Time, seconds *int32) *coordinationv1.Lease {
		l := &coordinationv1.Lease{ObjectMeta: metav1.ObjectMeta{Name: name, Namespace: v1alpha1.AgentLeaseNamespace},
			Spec: coordinationv1.LeaseSpec{LeaseDurationSeconds: seconds}}
		if renew != nil {
			l.Spec.RenewTime = &metav1.MicroTime{Time: *renew}
		}
		return l
	}
	e := newNodeIndex()
	var calls []string
	h := e.leaseHandler(func(old, cur *coordinationv1.Lease) {
		// Called after the index holds the event.
		node := v1alpha1.AgentLeaseName("n1")
		if cur != nil && cur.Name == node {
			if l, _ := leaseExpiry(cur); cur.Spec.RenewTime != nil && !e.alive("n1", l.Add(-time.Nanosecond)) {
				t.Errorf("the handler's callback ran before the index held the renewal")
			}
		}
		calls = append(calls, fmt.Sprintf("%v→%v", old != nil, cur != nil))
	})
	agree := func(what, node string, l *coordinationv1.Lease) {
		t.Helper()
		for _, age := range []time.Duration{-time.Second, 0, 39 * time.Second, 40*time.Second - 1, 40 * time.Second, 40*time.Second + 1,
			time.Duration(v1alpha1.AgentLeaseDurationSeconds)*time.Second - 1, time.Duration(v1alpha1.AgentLeaseDurationSeconds) * time.Second, time.Hour} {
			now := renewed.Add(age)
			want := l != nil && leaseAlive(l, now)
			if got := e.alive(node, now); got != want {
				t.Errorf("%s, %v after the renewal: alive %v, the Lease says %v", what, age, got, want)
			}
		}
	}
	name := v1alpha1.AgentLeaseName("n1")

	first := lease(name, &renewed, ptr.To[int32](40))
	h.OnAdd(first, true)
	agree("added, 40 s", "n1", first)
	defaulted := lease(name, &renewed, nil)
	h.OnUpdate(first, defaulted)
	agree("updated, no duration", "n1", defaulted)
	never := lease(name, nil, ptr.To[int32](40))
	h.OnUpdate(defaulted, never)
	agree("never renewed", "n1", never)
	h.OnUpdate(never, first)
	h.OnDelete(first)
	agree("deleted", "n1", nil)
	h.OnAdd(first, false)
	h.OnDelete(cache.DeletedFinalStateUnknown{Key: v1alpha1.AgentLeaseNamespace + "/" + name, Obj: first})
	agree("deleted, seen as a tombstone", "n1", nil)

	h.OnAdd(lease("n2", &renewed, ptr.To[int32](40)), false) // a Lease named like a node, not an agent's
	agree("a Lease that is not an agent's", "n2", nil)
	if len(e.byName) != 0 {
		t.Errorf("entries left: %v", e.byName)
	}
	h.OnUpdate("not a Lease", first)
	if want := []string{"false→true", "true→true", "true→true", "true→true", "true→false", "false→true", "true→false", "false→true", "false→true"}; !slices.Equal(calls, want) {
		t.Errorf("callbacks (old→cur present) %v, want %v: an update from an object that is not a Lease must re-plan as an add", calls, want)
	}
}

// alive reports whether the index holds node's agent as alive at now, as a
// pass reads it.
func (x *nodeIndex) alive(node string, now time.Time) bool {
	x.mu.RLock()
	defer x.mu.RUnlock()
	e := x.byName[node]
	return e != nil && e.aliveAt(now.UnixNano())
}
