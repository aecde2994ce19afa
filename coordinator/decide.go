package coordinator

import (
	"fmt"
	"maps"
	"slices"
	"time"

	corev1 "k8s.io/api/core/v1"

	"github.com/nodeward/nodeward/api/v1alpha1"
)

// Snapshot is everything one plan of a pool reads, without a cache or an
// API server behind it.
type Snapshot struct {
	// Pools are every pool (overlaps and grant owners depend on all).
	Pools []*v1alpha1.UpdatePool
	Nodes []*corev1.Node
	// AgentAlive reports whether a node's agent renews its Lease.
	AgentAlive func(node string) bool
	// Pending are the grants written but not yet seen in Nodes.
	Pending map[string]bool
	Now     time.Time
	// LeaderTerm is the leadership the grants are issued in (nil: none,
	// as without leader election).
	LeaderTerm *v1alpha1.LeaderTerm
}

// Write is one annotation patch the plan calls for (a merge patch: nil
// removes a key), to be made only while the node is still at
// ResourceVersion, as the controller makes it.
type Write struct {
	Node, ResourceVersion string
	// Grant is the new grant's name for a grant write, "" otherwise.
	Grant string
	Set   map[string]*string
}

// Decide is the controller's plan of pool over snap and the writes it
// makes, in order (targets, grants, soak starts, releases): the same
// planning code as a reconcile, for the protocol simulator. grantName names
// each new grant. The gates are never evaluated here: a pool with gates
// grants nothing, as when Prometheus cannot be reached.
func Decide(pool string, snap Snapshot, grantName func(node string) string) ([]Write, error) {
	var p *v1alpha1.UpdatePool
	for _, candidate := range snap.Pools {
		if candidate.Name == pool {
			p = candidate
		}
	}
	if p == nil {
		return nil, fmt.Errorf("pool %s not in the snapshot", pool)
	}
	in, _, err := buildInput(p, snap.Pools, snap.Nodes, snap.AgentAlive, snap.Pending, map[string]bool{}, snap.Now)
	if err != nil {
		return nil, err
	}
	plan, err := planPool(in)
	if err != nil {
		return nil, err
	}
	rv := map[string]string{}
	for _, v := range in.nodes {
		rv[v.name] = v.rv
	}
	var out []Write
	for _, n := range plan.setTarget {
		out = append(out, Write{Node: n, ResourceVersion: rv[n], Set: coordinatorKeys(p, plan.target)})
	}
	for _, n := range plan.grant {
		g := grantName(n)
		out = append(out, Write{Node: n, ResourceVersion: rv[n], Grant: g, Set: grantAnnotations(p, plan.target, g, plan.releaseAtDone, snap.LeaderTerm)})
	}
	yielded := map[string]bool{}
	for _, n := range plan.yielded {
		yielded[n] = true
	}
	for _, n := range slices.Sorted(maps.Keys(plan.startSoak)) {
		at := plan.startSoak[n].UTC().Format(time.RFC3339)
		out = append(out, Write{Node: n, ResourceVersion: rv[n], Set: map[string]*string{v1alpha1.AnnotationSoakUntil: &at}})
	}
	for _, n := range plan.release {
		out = append(out, Write{Node: n, ResourceVersion: rv[n], Set: releaseAnnotations(yielded[n], snap.Now)})
	}
	return out, nil
}
