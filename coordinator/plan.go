package coordinator

import (
	"crypto/sha256"
	"encoding/hex"
	"fmt"
	"math"
	"sort"
	"strings"
	"time"

	"k8s.io/apimachinery/pkg/util/intstr"

	"github.com/nodeward/nodeward/api/v1alpha1"
)

// ConfigName names a pool's target: a short hash of image and kernel
// arguments, so that any change to either is a new rollout.
func ConfigName(spec v1alpha1.UpdatePoolSpec) string {
	h := sha256.New()
	h.Write([]byte(spec.OSImage))
	for _, k := range spec.KernelArguments {
		h.Write([]byte{0})
		h.Write([]byte(k))
	}
	return "nodeward-" + hex.EncodeToString(h.Sum(nil))[:12]
}

// MaxUnavailable resolves the pool's budget over n nodes: an integer as is,
// a percentage rounded down but at least 1, and never above 1 for the
// control-plane pool.
func MaxUnavailable(spec v1alpha1.UpdatePoolSpec, n int) (int, error) {
	limit := 1
	if mu := spec.MaxUnavailable; mu != nil {
		switch mu.Type {
		case intstr.Int:
			if mu.IntVal < 0 {
				return 0, fmt.Errorf("maxUnavailable %d: must not be negative", mu.IntVal)
			}
			limit = int(mu.IntVal)
		case intstr.String:
			pct, ok := strings.CutSuffix(mu.StrVal, "%")
			var p int
			if _, err := fmt.Sscanf(pct, "%d", &p); !ok || err != nil || p < 0 || p > 100 {
				return 0, fmt.Errorf("maxUnavailable %q: want an integer or a percentage from 0%% to 100%%", mu.StrVal)
			}
			limit = max(1, int(math.Floor(float64(n)*float64(p)/100)))
		}
	}
	if spec.ControlPlane {
		limit = min(limit, 1)
	}
	return limit, nil
}

// poolPlan is what one reconcile of a pool decides.
type poolPlan struct {
	target      string
	limit       int
	unavailable map[string]string // node → why
	grant       []string          // nodes to grant, in order
	release     []string          // nodes whose slot is given back
	yielded     []string          // released because the agent yielded
	setTarget   []string          // nodes whose target annotation is stale
	updated     int
	ready       int
	degraded    []string
	waiting     string // why no grant was made although nodes need one
}

// planPool decides grants and releases for one pool. pending holds grants
// written but not yet seen in the cache (expectations): they count as
// unavailable, so a stale cache can never push the pool past its budget.
func planPool(pool *v1alpha1.UpdatePool, nodes []nodeView, pending map[string]bool, now time.Time) (*poolPlan, error) {
	target := pool.Spec.OSImage
	limit, err := MaxUnavailable(pool.Spec, len(nodes))
	if err != nil {
		return nil, err
	}
	p := &poolPlan{target: target, limit: limit, unavailable: map[string]string{}}
	busyZones := map[string]bool{}
	var candidates []nodeView
	staging := 0 // nodes that need the update but have not staged it yet
	p.setTarget = targetsToSet(nodes, target, pool.Spec.MaxStaging)
	for _, n := range nodes {
		if n.granted() && n.stateGrnt == n.grant && n.stateTgt == target &&
			(n.state == v1alpha1.StepDone || n.state == v1alpha1.StepYielded) {
			p.release = append(p.release, n.name)
			if n.state == v1alpha1.StepYielded {
				p.yielded = append(p.yielded, n.name)
			}
			continue // released now; counted available from the next event
		}
		if n.updated(target) {
			p.updated++
		}
		if n.degraded(target) {
			p.degraded = append(p.degraded, n.name)
		}
		if pending[n.name] {
			p.unavailable[n.name] = "updating (grant not yet observed)"
			busyZones[n.zone] = true
			continue
		}
		if down, why := n.unavailable(); down {
			p.unavailable[n.name] = why
			if n.granted() {
				busyZones[n.zone] = true
			}
			continue
		}
		p.ready++
		// Only a node that staged the target is granted: the download
		// happens outside the slot, and the staging budget holds. A node
		// that cannot stage would not get further with a slot either; its
		// agent reports why.
		if !n.updated(target) && !n.held && target != "" {
			if n.target == target && n.staged == target {
				candidates = append(candidates, n)
			} else {
				staging++
			}
		}
	}
	if target == "" || len(candidates) == 0 {
		if staging > 0 && len(p.unavailable) < limit {
			p.waiting = fmt.Sprintf("%d nodes still staging the target", staging)
		}
		return p, nil
	}
	switch open, err := inWindow(pool.Spec.MaintenanceWindows, now); {
	case err != nil:
		return nil, err
	case pool.Spec.Paused:
		p.waiting = "pool is paused"
		return p, nil
	case !open:
		p.waiting = "outside every maintenance window"
		return p, nil
	}
	free := limit - len(p.unavailable)
	if free <= 0 {
		p.waiting = fmt.Sprintf("%d of at most %d nodes unavailable", len(p.unavailable), limit)
		return p, nil
	}
	p.grant = pickGrants(candidates, busyZones, free)
	return p, nil
}

// targetsToSet returns the nodes whose target annotation is stale, at most
// as many as the staging budget leaves: maxStaging minus the nodes still
// downloading the target (live agent, not yet staged, not done or
// degraded). nil maxStaging is no budget.
func targetsToSet(nodes []nodeView, target string, maxStaging *int32) []string {
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
	var stale []nodeView
	for _, n := range nodes {
		if n.target != target {
			stale = append(stale, n)
		}
	}
	// The order pickGrants grants in (zone, then queue position), so that
	// the first nodes to stage are the first to be granted.
	sort.Slice(stale, func(i, j int) bool {
		if a, b := stale[i], stale[j]; a.zone != b.zone {
			return a.zone < b.zone
		}
		return queuedBefore(stale[i], stale[j])
	})
	out := make([]string, 0, min(max(budget, 0), len(stale)))
	for _, n := range stale[:min(max(budget, 0), len(stale))] {
		out = append(out, n.name)
	}
	return out
}

// pickGrants orders candidates (all of them staged) by queue position and
// confines concurrent updates to one zone: the zone already updating, else
// the first zone in name order that has a candidate.
func pickGrants(candidates []nodeView, busyZones map[string]bool, free int) []string {
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
	var inZone []nodeView
	for _, c := range candidates {
		if c.zone == zone {
			inZone = append(inZone, c)
		}
	}
	sort.Slice(inZone, func(i, j int) bool { return queuedBefore(inZone[i], inZone[j]) })
	out := make([]string, 0, min(free, len(inZone)))
	for _, c := range inZone[:min(free, len(inZone))] {
		out = append(out, c.name)
	}
	return out
}

// queuedBefore is the grant queue: nodes that never yielded (or yielded
// longest ago) first, then the oldest, then by name.
func queuedBefore(a, b nodeView) bool {
	if !a.yieldedAt.Equal(b.yieldedAt) {
		return a.yieldedAt.Before(b.yieldedAt)
	}
	if !a.created.Equal(b.created) {
		return a.created.Before(b.created)
	}
	return a.name < b.name
}
