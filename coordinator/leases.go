package coordinator

import (
	"strings"
	"time"

	coordinationv1 "k8s.io/api/coordination/v1"
	"k8s.io/client-go/tools/cache"

	"github.com/nodeward/nodeward/api/v1alpha1"
)

// leaseHandler keeps the agents' Lease expiries in the index from a Lease
// informer's events. A pass asks for every node's liveness; at 10,000
// nodes, looking each Lease up in the informer's store (a key built per
// node, a lock, then the Lease and its renewal time, each a cache miss)
// was a quarter of the pass (docs/benchmarks.md, "Coordinator at 10,000
// nodes"). A node whose Lease is absent or was never renewed has no
// expiry: its agent is not alive, as leaseAlive has it. Leases whose name
// is not an agent's are ignored: no node's liveness reads them.
//
// then runs for each event after the index holds it, with the Lease before
// and after it (old nil for an add, cur nil for a delete): a pass that an
// event enqueues reads the liveness the event brought.
func (x *nodeIndex) leaseHandler(then func(old, cur *coordinationv1.Lease)) cache.ResourceEventHandlerFuncs {
	return indexHandler(x.setLease, x.removeLease, then)
}

// setLease keeps l's expiry, when it is an agent's Lease.
func (x *nodeIndex) setLease(l *coordinationv1.Lease) {
	node, ok := strings.CutPrefix(l.Name, v1alpha1.AgentLeasePrefix)
	if !ok {
		return
	}
	expiry, renewed := leaseExpiry(l)
	x.mu.Lock()
	defer x.mu.Unlock()
	if !renewed {
		x.clearExpiry(node)
		return
	}
	// An expiry at the Unix epoch exactly would read as none; it is long
	// past either way.
	x.entry(node).expiry = max(expiry.UnixNano(), 1)
}

// removeLease forgets l's expiry, when it is an agent's Lease.
func (x *nodeIndex) removeLease(l *coordinationv1.Lease) {
	if node, ok := strings.CutPrefix(l.Name, v1alpha1.AgentLeasePrefix); ok {
		x.mu.Lock()
		defer x.mu.Unlock()
		x.clearExpiry(node)
	}
}

// clearExpiry forgets node's expiry. Callers hold the write lock.
func (x *nodeIndex) clearExpiry(node string) {
	if e := x.byName[node]; e != nil {
		e.expiry = 0
		x.forgetIfEmpty(e)
	}
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
