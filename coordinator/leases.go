package coordinator

import (
	"strings"
	"sync"
	"time"

	coordinationv1 "k8s.io/api/coordination/v1"
	"k8s.io/client-go/tools/cache"

	"github.com/nodeward/nodeward/api/v1alpha1"
)

// leaseExpiries is when each node's agent Lease expires, kept from the
// Lease informer's events. A pass asks for every node's liveness; at
// 10,000 nodes, looking each Lease up in the informer's store (a key built
// per node, a lock, then the Lease and its renewal time, each a cache
// miss) was a quarter of the pass (docs/benchmarks.md, "Coordinator at
// 10,000 nodes"). A node whose Lease is absent or was never renewed has
// no entry: its agent is not alive, as leaseAlive has it.
type leaseExpiries struct {
	mu     sync.RWMutex
	expiry map[string]int64 // node name → the Lease's expiry, Unix nanoseconds
}

func newLeaseExpiries() *leaseExpiries { return &leaseExpiries{expiry: map[string]int64{}} }

// handler keeps the expiries from a Lease informer's events. Leases whose
// name is not an agent's are ignored: no node's liveness reads them.
func (e *leaseExpiries) handler() cache.ResourceEventHandlerFuncs {
	return cache.ResourceEventHandlerFuncs{
		AddFunc:    e.set,
		UpdateFunc: func(_, obj any) { e.set(obj) },
		DeleteFunc: e.remove,
	}
}

func (e *leaseExpiries) set(obj any) {
	l, ok := obj.(*coordinationv1.Lease)
	if !ok {
		return
	}
	node, ok := strings.CutPrefix(l.Name, v1alpha1.AgentLeasePrefix)
	if !ok {
		return
	}
	expiry, renewed := leaseExpiry(l)
	e.mu.Lock()
	defer e.mu.Unlock()
	if !renewed {
		delete(e.expiry, node)
		return
	}
	e.expiry[node] = expiry.UnixNano()
}

func (e *leaseExpiries) remove(obj any) {
	if tomb, ok := obj.(cache.DeletedFinalStateUnknown); ok {
		obj = tomb.Obj
	}
	if l, ok := obj.(*coordinationv1.Lease); ok {
		if node, ok := strings.CutPrefix(l.Name, v1alpha1.AgentLeasePrefix); ok {
			e.mu.Lock()
			delete(e.expiry, node)
			e.mu.Unlock()
		}
	}
}

// alive reports whether node's agent Lease was renewed within its
// duration at now.
func (e *leaseExpiries) alive(node string, now time.Time) bool {
	e.mu.RLock()
	expiry, ok := e.expiry[node]
	e.mu.RUnlock()
	return ok && now.UnixNano() < expiry
}

// leaseExpiry is when l expires: its renewal plus its duration (the
// agents' default when it has none); false when it was never renewed.
func leaseExpiry(l *coordinationv1.Lease) (time.Time, bool) {
	spec := l.Spec
	if spec.RenewTime == nil {
		return time.Time{}, false
	}
	d := time.Duration(v1alpha1.AgentLeaseDurationSeconds) * time.Second
	if spec.LeaseDurationSeconds != nil {
		d = time.Duration(*spec.LeaseDurationSeconds) * time.Second
	}
	return spec.RenewTime.Add(d), true
}

// leaseAlive reports whether l was renewed within its duration at now.
func leaseAlive(l *coordinationv1.Lease, now time.Time) bool {
	expiry, renewed := leaseExpiry(l)
	return renewed && now.Before(expiry)
}
