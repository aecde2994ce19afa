package coordinator

import (
	"fmt"
	"sort"
	"time"

	"github.com/nodeward/nodeward/api/v1alpha1"
)

// targetsToSet returns the managed nodes whose target annotation is stale,
// at most as many as the staging budget leaves: maxStaging minus the nodes
// still downloading the target (live agent, not yet staged, not done or
// degraded). nil maxStaging is no budget. A frozen node (granted, being
// granted) keeps the target its grant is for until it is released.
func targetsToSet(nodes []*nodeView, frozen map[string]bool, target string, maxStaging *int32, before queueOrder) []string {
	if target == "" {
		return nil
	}
	budget, staging := len(nodes), 0
	for _, n := range nodes {
		if n.target == target && n.staged != target && !n.updated(target) && !n.degraded(target) && n.leaseOK {
			staging++
		}
	}
	if maxStaging != nil {
		budget = int(*maxStaging) - staging
	}
	var stale []*nodeView
	for _, n := range nodes {
		if n.target != target && !frozen[n.name] {
			stale = append(stale, n)
		}
	}
	// The order pickGrants grants in (zone, then queue position), so that
	// the first nodes to stage are the first to be granted.
	sort.Slice(stale, func(i, j int) bool {
		if a, b := stale[i], stale[j]; a.zone != b.zone {
			return a.zone < b.zone
		}
		return before(stale[i], stale[j])
	})
	out := make([]string, 0, min(max(budget, 0), len(stale)))
	for _, n := range stale[:min(max(budget, 0), len(stale))] {
		out = append(out, n.name)
	}
	return out
}

// pickGrants orders candidates (all of them staged) by queue position and
// confines concurrent updates to one zone: the zone already updating, else
// the first zone in name order that has a candidate. It picks at most
// controlPlane control-plane nodes.
func pickGrants(candidates []*nodeView, busyZones map[string]bool, free, controlPlane int, before queueOrder) []string {
	if controlPlane == 0 {
		var workers []*nodeView
		for _, c := range candidates {
			if !c.controlPlane {
				workers = append(workers, c)
			}
		}
		candidates = workers
	}
	zone, found := "", false
	if len(busyZones) > 0 {
		zones := make([]string, 0, len(busyZones))
		for z := range busyZones {
			zones = append(zones, z)
		}
		sort.Strings(zones)
		zone, found = zones[0], true
	} else {
		for _, c := range candidates {
			if !found || c.zone < zone {
				zone, found = c.zone, true
			}
		}
	}
	var inZone []*nodeView
	for _, c := range candidates {
		if c.zone == zone {
			inZone = append(inZone, c)
		}
	}
	sort.Slice(inZone, func(i, j int) bool { return before(inZone[i], inZone[j]) })
	out := make([]string, 0, min(free, len(inZone)))
	for _, c := range inZone {
		if len(out) == free {
			break
		}
		if c.controlPlane {
			if controlPlane == 0 {
				continue
			}
			controlPlane--
		}
		out = append(out, c.name)
	}
	return out
}

// queueOrder is a pool's grant queue: whether a queues before b.
type queueOrder func(a, b *nodeView) bool

// queueOf is the grant queue of a pool whose spec.order is order, chosen
// once per pass: nodes that never yielded (or yielded longest ago) first,
// then by age as spec.order says (the oldest first by default), then by
// name. An order the CRD's enum would have refused (a cluster that
// bypassed its validation) is an error, so the pool is not planned at all
// rather than updated in an order nobody asked for.
func queueOf(order v1alpha1.UpdateOrder) (queueOrder, error) {
	createdFirst, err := agedFirst(order)
	if err != nil {
		return nil, err
	}
	return func(a, b *nodeView) bool {
		if !a.yieldedAt.Equal(b.yieldedAt) {
			return a.yieldedAt.Before(b.yieldedAt)
		}
		if !a.created.Equal(b.created) {
			return createdFirst(a.created, b.created)
		}
		return a.name < b.name
	}, nil
}

// agedFirst is the one place spec.order is read: whether a node created
// at a queues before one created at b.
func agedFirst(order v1alpha1.UpdateOrder) (func(a, b time.Time) bool, error) {
	switch order {
	case "", v1alpha1.OldestFirst:
		return time.Time.Before, nil
	case v1alpha1.NewestFirst:
		return time.Time.After, nil
	}
	return nil, fmt.Errorf("spec.order %q: want %s (the default) or %s", order, v1alpha1.OldestFirst, v1alpha1.NewestFirst)
}
