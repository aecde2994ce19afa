package coordinator

import (
	"context"
	"errors"
	"maps"
	"slices"
	"time"

	corev1 "k8s.io/api/core/v1"

	"github.com/nodeward/nodeward/api/v1alpha1"
)

// apply writes a plan: the stale targets, then the grants, then the
// releases, then the drain policy of the nodes in flight when the pool's
// changed. A node whose write fails does not stop the others: its error
// is logged, reported as an Event on the pool, the node backs off, and the
// errors are returned together so the pool is requeued with backoff.
func (c *Controller) apply(ctx context.Context, pool *v1alpha1.UpdatePool, plan *poolPlan, in planInput, names map[string]string) error {
	views := planned(plan, in.nodes)
	var errs []error
	result := func(node, what string, err error) {
		switch {
		case err == nil:
			c.backoff.succeeded(node)
		case errors.Is(err, errStale):
			c.opts.Log.Debug("node changed since planned", "pool", pool.Name, "node", node, "write", what)
			errs = append(errs, err)
		default:
			c.backoff.failed(node, in.now)
			c.opts.Log.Error("write node", "pool", pool.Name, "node", node, "write", what, "err", err)
			c.events.Eventf(poolRef(pool), corev1.EventTypeWarning, "NodeWriteFailed", "%s: %s: %v", node, what, err)
			errs = append(errs, err)
		}
	}
	for _, n := range plan.setTarget {
		if !in.backoff[n] {
			err := patchNode(ctx, c.opts.Client, n, views[n].rv, coordinatorKeys(pool, plan.target))
			result(n, "set target", err)
		}
	}
	// Grants go out before the releases of the same plan; a node released
	// here still counted as unavailable in the plan (releasingWhy), so no
	// grant of this pass rests on its release.
	for _, n := range plan.grant {
		result(n, "grant", c.grant(ctx, pool, plan, views[n], names[n], in.now))
	}
	c.applySoaks(ctx, plan, views, result)
	yielded := map[string]bool{}
	for _, n := range plan.yielded {
		yielded[n] = true
	}
	for _, n := range plan.release {
		if !in.backoff[n] {
			result(n, "release", c.release(ctx, pool, views[n], yielded[n], in.now))
		}
	}
	c.applyDrainPolicies(ctx, pool, in, views, result)
	return errors.Join(errs...)
}

// planned indexes the views of the nodes plan writes to. Only those: at
// 10,000 nodes a map of every view cost a pass several milliseconds.
func planned(plan *poolPlan, nodes []nodeView) map[string]nodeView {
	want := make(map[string]bool, len(plan.setTarget)+len(plan.grant)+len(plan.release)+len(plan.startSoak))
	for _, list := range [][]string{plan.setTarget, plan.grant, plan.release} {
		for _, n := range list {
			want[n] = true
		}
	}
	for n := range plan.startSoak {
		want[n] = true
	}
	views := make(map[string]nodeView, len(want))
	for i := range nodes {
		if want[nodes[i].name] {
			views[nodes[i].name] = nodes[i]
		}
	}
	return views
}

// applySoaks writes soak-until on the nodes whose soak starts now.
func (c *Controller) applySoaks(ctx context.Context, plan *poolPlan, views map[string]nodeView, result func(node, what string, err error)) {
	for _, n := range slices.Sorted(maps.Keys(plan.startSoak)) {
		until := plan.startSoak[n].UTC().Format(time.RFC3339) // whole seconds (soakEnd)
		result(n, "start soak", patchNode(ctx, c.opts.Client, n, views[n].rv, map[string]*string{v1alpha1.AnnotationSoakUntil: &until}))
	}
}
