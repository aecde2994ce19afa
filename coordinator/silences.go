package coordinator

import (
	"context"
	"fmt"
	"slices"
	"strings"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/nodeward/nodeward/api/v1alpha1"
)

// silenceRenewal is how often a pool's silences are synced although the
// nodes they cover did not change: silence.Keeper extends those near
// their end, and one that an operator expired by hand comes back.
const silenceRenewal = 5 * time.Minute

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
	g := c.guardrails.of(pool.Name)
	if g.silenceErr == "" && g.silenced == key && now.Sub(g.silencedAt) < silenceRenewal {
		return
	}
	ids, err := c.opts.Silences.Sync(ctx, pool.Name, spec, nodes)
	c.guardrails.update(pool.Name, func(g *guardrailState) {
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
		plan.hold.message = fmt.Sprintf("silences.required: no silence for %s yet: %v", strings.Join(held, ", "), err)
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
