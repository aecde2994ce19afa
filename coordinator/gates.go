package coordinator

import (
	"context"
	"encoding/json"
	"fmt"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"

	"github.com/nodeward/nodeward/api/v1alpha1"
)

// evaluateGates asks the objects and Prometheus (askGates), records the verdict for the status and
// the metrics, and reports a change of verdict as an Event.
func (c *Controller) evaluateGates(ctx context.Context, pool *v1alpha1.UpdatePool, now time.Time) gateVerdict {
	start := time.Now()
	answer := c.askGates(ctx, pool.Spec.Gates, pool.Name)
	c.opts.Metrics.gateSeconds.WithLabelValues(pool.Name).Observe(time.Since(start).Seconds())
	v := gateVerdict{passing: answer.Passing, reason: answer.Reason, message: answer.Message}
	prev := c.guardrails.of(pool.Name).verdict
	c.guardrails.update(pool.Name, func(g *guardrailState) { g.verdict, g.evaluated = &v, now })
	c.opts.Metrics.gatesPassing.WithLabelValues(pool.Name).Set(map[bool]float64{true: 1}[v.passing])
	if prev == nil || *prev != v {
		kind, reason := corev1.EventTypeNormal, "GatesPassing"
		if !v.passing {
			kind, reason = corev1.EventTypeWarning, "GatesFailing"
		}
		c.opts.Log.Info("gates evaluated", "pool", pool.Name, "passing", v.passing, "reason", v.reason, "message", v.message)
		c.events.Event(poolRef(pool), kind, reason, v.reason+": "+v.message)
	}
	return v
}

// persistHalt writes the halt a gate failing during a soak calls for to
// the pool, before any node is released, so that a restart or a gate that
// recovers meanwhile cannot lose it.
func (c *Controller) persistHalt(ctx context.Context, pool *v1alpha1.UpdatePool, message string) error {
	// No resourceVersion precondition: the coordinator's own status
	// writes move it every second, and a halt written for a target the
	// pool no longer has is ignored (it names the target's config).
	patch, err := json.Marshal(map[string]any{"metadata": map[string]any{
		"annotations": map[string]string{v1alpha1.AnnotationHalted: HaltedByGate(pool, message)},
	}})
	if err != nil {
		return fmt.Errorf("encode halt of pool %s: %w", pool.Name, err)
	}
	if _, err := c.opts.Dynamic.Resource(v1alpha1.UpdatePoolResource()).Patch(ctx, pool.Name, types.MergePatchType, patch, metav1.PatchOptions{}); err != nil {
		return fmt.Errorf("halt pool %s: %w", pool.Name, err)
	}
	c.opts.Log.Warn("pool halted", "pool", pool.Name, "reason", haltGateFailed, "message", message)
	c.events.Event(poolRef(pool), corev1.EventTypeWarning, "PoolHalted", message)
	return nil
}

// gatesCondition is the GatesPassing condition's status, reason and
// message from the last verdict.
func gatesCondition(g guardrailState) (metav1.ConditionStatus, string, string) {
	switch v := g.verdict; {
	case v == nil:
		return metav1.ConditionUnknown, "NotEvaluated", "not evaluated yet: no grant or soak has needed them"
	case v.passing:
		return metav1.ConditionTrue, v.reason, v.message
	default:
		return metav1.ConditionFalse, v.reason, v.message
	}
}
