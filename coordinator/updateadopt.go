package coordinator

import (
	"context"
	"encoding/json"
	"fmt"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"

	"github.com/nodeward/nodeward/api/v1alpha1"
)

// adoptUpdate moves a pool with policy Automatic to the next recommended
// hop its update source offers, once the pool is settled. It only writes
// spec.osImage (pinned by digest): the pool's guardrails (maxUnavailable,
// canaries, soaks, gates, windows) then roll the new target out as they
// would an operator's edit. The write is conditional on the pool's
// resourceVersion, so that an operator's edit or pause made meanwhile wins.
func (c *Controller) adoptUpdate(ctx context.Context, pool *v1alpha1.UpdatePool, plan *poolPlan, offer *updateOffer) error {
	us := pool.Spec.UpdateSource
	if us == nil || us.Policy != v1alpha1.AutomaticUpdates || offer == nil || offer.next == nil ||
		offer.retrieved.Status != metav1.ConditionTrue || offer.next.Image == pool.Spec.OSImage {
		return nil
	}
	if why := unsettled(pool, plan); why != "" {
		return nil
	}
	from := pool.Spec.OSImage
	if cur := offer.status.Current; cur != nil {
		from = cur.Version
	}
	patch, err := json.Marshal(map[string]any{
		"metadata": map[string]any{"resourceVersion": pool.ResourceVersion},
		"spec":     map[string]any{"osImage": offer.next.Image},
	})
	if err != nil {
		return fmt.Errorf("encode the next hop of pool %s: %w", pool.Name, err)
	}
	_, err = c.opts.Dynamic.Resource(v1alpha1.UpdatePoolResource()).Patch(ctx, pool.Name, types.MergePatchType, patch, metav1.PatchOptions{})
	if apierrors.IsConflict(err) {
		return fmt.Errorf("move pool %s to %s: %w", pool.Name, offer.next.Version, errPoolChanged)
	}
	if err != nil {
		return fmt.Errorf("move pool %s to %s: %w", pool.Name, offer.next.Version, err)
	}
	c.opts.Log.Info("pool moved to the next update of its source", "pool", pool.Name, "from", from,
		"to", offer.next.Version, "image", offer.next.Image, "channel", us.Channel)
	c.events.Eventf(poolRef(pool), corev1.EventTypeNormal, "UpdateAdopted", "policy Automatic: from %s to %s (%s)",
		from, offer.next.Version, offer.next.Image)
	return nil
}

// unsettled says why a pool is not ready for its next hop, or "" when it
// is: every node it alone selects Done on its target, none granted,
// soaking, failed or shared, not paused, halted or being deleted.
func unsettled(pool *v1alpha1.UpdatePool, plan *poolPlan) string {
	checks := []struct {
		bad bool
		why string
	}{
		{pool.DeletionTimestamp != nil, "being deleted"},
		{pool.Spec.Paused, "paused"},
		{plan.halted.reason != "", "halted"},
		{plan.machines == 0, "no nodes"},
		{plan.updated != plan.machines, "nodes not updated"},
		{len(plan.degraded) > 0, "nodes failed"},
		{len(plan.overlapping) > 0, "nodes shared with another pool"},
		{len(plan.inFlight)+len(plan.grant)+len(plan.release) > 0, "grants held"},
		{len(plan.soaking)+len(plan.soakOver)+len(plan.startSoak) > 0, "nodes soaking"},
	}
	for _, c := range checks {
		if c.bad {
			return c.why
		}
	}
	return ""
}
