package coordinator

import (
	"context"

	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime"

	"github.com/nodeward/nodeward/api/v1alpha1"
	"github.com/nodeward/nodeward/gate"
	"github.com/nodeward/nodeward/objectgate"
)

// askGates is one evaluation of all of pool's gates: the object gates
// first, read from the coordinator's watches and so cheap, then Prometheus,
// asked only when the objects pass. The first that fails decides.
func (c *Controller) askGates(ctx context.Context, gates *v1alpha1.Gates, pool string) gate.Verdict {
	objects := c.objectGates.Evaluate(pool, gates.Objects)
	if !objects.Passing {
		return objects
	}
	prom := c.opts.Gates.Evaluate(ctx, gates)
	if !prom.Passing || len(gates.Objects) == 0 {
		return prom
	}
	prom.Message += "; " + objects.Message
	return prom
}

// retainObjectWatches stops the object watches no pool names any more.
// It runs on every pool event, so that a gate removed from a pool, or a
// pool deleted, stops reading its objects.
func (c *Controller) retainObjectWatches() {
	keep := map[objectgate.Key]bool{}
	for _, gated := range c.poolsByObjectWatch() {
		for key := range gated {
			keep[key] = true
		}
	}
	c.objectGates.Watches.Retain(keep)
}

// enqueuePoolsWatching re-plans the pools whose object gates read key's
// objects, on an event of one of them; the others' verdicts cannot change.
func (c *Controller) enqueuePoolsWatching(key objectgate.Key) {
	for pool, gated := range c.poolsByObjectWatch() {
		if gated[key] {
			c.queue.Add(pool)
		}
	}
}

// poolsByObjectWatch is, per pool key, the object watches its gates read.
// A pool that does not decode reads none: it is not planned either.
func (c *Controller) poolsByObjectWatch() map[string]map[objectgate.Key]bool {
	out := map[string]map[objectgate.Key]bool{}
	for _, obj := range c.pools.GetStore().List() {
		u, ok := obj.(*unstructured.Unstructured)
		if !ok {
			continue
		}
		var pool v1alpha1.UpdatePool
		if runtime.DefaultUnstructuredConverter.FromUnstructured(u.Object, &pool) != nil || pool.Spec.Gates == nil {
			continue
		}
		for _, g := range pool.Spec.Gates.Objects {
			if out[u.GetName()] == nil {
				out[u.GetName()] = map[objectgate.Key]bool{}
			}
			out[u.GetName()][objectgate.KeyOf(g)] = true
		}
	}
	return out
}
