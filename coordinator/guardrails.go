package coordinator

import (
	"context"
	"encoding/json"
	"fmt"
	"maps"
	"slices"
	"strings"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"

	"github.com/nodeward/nodeward/api/v1alpha1"
)

// silenceRenewal is how often a pool's silences are synced although the
// nodes they cover did not change: silence.Keeper extends those near
// their end, and one that an operator expired by hand comes back.
const silenceRenewal = 5 * time.Minute

// guardrailState is what the controller remembers of a pool's guardrails
// between passes: the gates' last verdict and the last silence sync. Both
// are rebuilt from the outside world after a restart (Prometheus is asked
// again, Alertmanager's silences are listed).
type guardrailState struct {
	verdict   *gateVerdict
	evaluated time.Time
	// silenced is the sorted node list of the last successful sync,
	// silencedAt its time, silenceErr the last sync's error ("" if none).
	silenced   string
	silencedAt time.Time
	silenceErr string
}

func (c *Controller) guardrail(pool string) guardrailState {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.guardrails[pool]
}

func (c *Controller) setGuardrail(pool string, update func(*guardrailState)) {
	c.mu.Lock()
	defer c.mu.Unlock()
	g := c.guardrails[pool]
	update(&g)
	c.guardrails[pool] = g
}

// plan plans pool, and when the plan needs the gates' verdict (it would
// grant or end a soak) or the last verdict is older than Resync (the
// status shows the gates while the pool waits), evaluates them and plans
// again with the verdict.
func (c *Controller) plan(ctx context.Context, pool *v1alpha1.UpdatePool, now time.Time) (planInput, []*corev1.Node, *poolPlan, error) {
	in, silent, plan, err := c.planPass(pool, now, nil)
	if err != nil || pool.Spec.Gates == nil {
		return in, silent, plan, err
	}
	stale := now.Sub(c.guardrail(pool.Name).evaluated) >= c.opts.Resync
	if !plan.needGates && !(stale && (plan.queued > 0 || len(plan.soaking) > 0)) {
		return in, silent, plan, nil
	}
	v := c.evaluateGates(ctx, pool, now)
	in.gates = &v
	plan, err = planPool(in)
	if err != nil {
		return in, nil, nil, fmt.Errorf("plan pool %s: %w", pool.Name, err)
	}
	return in, silent, plan, nil
}

// evaluateGates asks Prometheus, records the verdict for the status and
// the metrics, and reports a change of verdict as an Event.
func (c *Controller) evaluateGates(ctx context.Context, pool *v1alpha1.UpdatePool, now time.Time) gateVerdict {
	start := time.Now()
	answer := c.opts.Gates.Evaluate(ctx, pool.Spec.Gates)
	c.opts.Metrics.gateSeconds.WithLabelValues(pool.Name).Observe(time.Since(start).Seconds())
	v := gateVerdict{passing: answer.Passing, reason: answer.Reason, message: answer.Message}
	prev := c.guardrail(pool.Name).verdict
	c.setGuardrail(pool.Name, func(g *guardrailState) { g.verdict, g.evaluated = &v, now })
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

// syncSilences keeps one Alertmanager silence for each node the plan has
// unavailable for an update (in flight, granted now), before the grants
// are written, so the silence is there when the node goes down. It syncs
// only when that set changed, the last sync failed, or silenceRenewal
// passed. Under silences.required, a node granted now whose silence could
// not be made is not granted in this pass.
func (c *Controller) syncSilences(ctx context.Context, pool *v1alpha1.UpdatePool, plan *poolPlan, now time.Time) {
	spec := pool.Spec.Silences
	if spec == nil {
		return
	}
	nodes := slices.Clone(plan.inFlight)
	slices.Sort(nodes)
	nodes = slices.Compact(nodes)
	key := strings.Join(nodes, ",")
	g := c.guardrail(pool.Name)
	if g.silenceErr == "" && g.silenced == key && now.Sub(g.silencedAt) < silenceRenewal {
		return
	}
	ids, err := c.opts.Silences.Sync(ctx, pool.Name, spec, nodes)
	c.setGuardrail(pool.Name, func(g *guardrailState) {
		g.silenceErr = ""
		if err != nil {
			g.silenceErr = err.Error()
			return
		}
		g.silenced, g.silencedAt = key, now
	})
	if err == nil {
		return
	}
	c.opts.Metrics.silenceErrors.WithLabelValues(pool.Name).Inc()
	c.opts.Log.Error("sync Alertmanager silences", "pool", pool.Name, "nodes", nodes, "err", err)
	c.events.Eventf(poolRef(pool), corev1.EventTypeWarning, "SilenceFailed", "%v", err)
	if !spec.Required {
		return
	}
	var granted, held []string
	for _, n := range plan.grant {
		if _, ok := ids[n]; ok {
			granted = append(granted, n)
		} else {
			held = append(held, n)
		}
	}
	if len(held) > 0 {
		plan.grant = granted
		plan.inFlight = slices.DeleteFunc(plan.inFlight, func(n string) bool { return slices.Contains(held, n) })
		plan.waiting = fmt.Sprintf("silences.required: no silence for %s yet: %v", strings.Join(held, ", "), err)
	}
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

// silencedCondition is the Silenced condition's status, reason and message.
func silencedCondition(g guardrailState) (metav1.ConditionStatus, string, string) {
	if g.silenceErr != "" {
		return metav1.ConditionFalse, "SilenceFailed", g.silenceErr
	}
	if g.silenced == "" {
		return metav1.ConditionTrue, "NoneNeeded", "no node is unavailable for an update"
	}
	return metav1.ConditionTrue, "Silenced", "Alertmanager silences kept for " + g.silenced
}

// applySoaks writes soak-until on the nodes whose soak starts now.
func (c *Controller) applySoaks(ctx context.Context, plan *poolPlan, views map[string]nodeView, result func(node, what string, err error)) {
	for _, n := range slices.Sorted(maps.Keys(plan.startSoak)) {
		until := plan.startSoak[n].UTC().Format(time.RFC3339) // whole seconds (soakEnd)
		result(n, "start soak", patchNode(ctx, c.opts.Client, n, views[n].rv, map[string]*string{v1alpha1.AnnotationSoakUntil: &until}))
	}
}
