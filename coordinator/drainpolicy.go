package coordinator

import (
	"context"

	"github.com/nodeward/nodeward/api/v1alpha1"
)

// The drain policy of a node in flight. The target and grant writes carry
// the pool's drain policy, but a granted node gets neither until its grant
// is released: a pool switched from onTimeout Force to Retry while one of
// its nodes drains left force-on-drain-timeout there, and the agent forced
// the pods a PDB protected. So the policy alone is rewritten on the nodes
// in flight whenever it differs from the pool's.

// stalePolicies are the nodes holding a grant of pool whose drain policy
// annotations differ from the pool's policy now, with that policy as the
// patch. Nodes the plan writes to already (written) and nodes backing off
// wait for the next pass: one write per node and pass, each conditional
// on the version planned.
func stalePolicies(pool *v1alpha1.UpdatePool, in planInput, written map[string]nodeView) ([]nodeView, map[string]*string) {
	want := coordinatorKeys(pool, "")
	delete(want, v1alpha1.AnnotationTarget) // a granted node keeps its target
	var stale []nodeView
	for _, v := range in.nodes {
		if v.grant == "" || v.owner != pool.Name || in.backoff[v.name] {
			continue
		}
		if _, busy := written[v.name]; busy {
			continue
		}
		for i, k := range drainPolicyKeys {
			if !sameValue(v.drainPolicy[i], want[k]) {
				stale = append(stale, v)
				break
			}
		}
	}
	return stale, want
}

// sameValue compares two annotation values, nil meaning absent.
func sameValue(a, b *string) bool {
	if a == nil || b == nil {
		return a == b
	}
	return *a == *b
}

// applyDrainPolicies rewrites the drain policy keys, and only those, on
// the nodes stalePolicies names.
func (c *Controller) applyDrainPolicies(ctx context.Context, pool *v1alpha1.UpdatePool, in planInput,
	written map[string]nodeView, result func(node, what string, err error)) {
	stale, policy := stalePolicies(pool, in, written)
	for _, v := range stale {
		result(v.name, "update drain policy", patchNode(ctx, c.opts.Client, v.name, v.rv, policy))
	}
}
