package coordinator

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/nodeward/nodeward/api/v1alpha1"
)

// coordinatorKeys are the annotations of every target and grant write: the
// target and the pool's drain policy, every key present, those unset
// deleted (null), so a policy removed from the pool leaves no stale key.
func coordinatorKeys(pool *v1alpha1.UpdatePool, target string) map[string]*string {
	var timeout, yield, force *string
	if d := pool.Spec.Drain; d != nil {
		if d.Timeout != "" {
			timeout = &d.Timeout
		}
		t := "true"
		switch d.OnTimeout {
		case "Yield":
			yield = &t
		case "Force":
			force = &t
		}
	}
	return map[string]*string{
		v1alpha1.AnnotationTarget:              &target,
		v1alpha1.AnnotationDrainTimeout:        timeout,
		v1alpha1.AnnotationYieldOnDrainTimeout: yield,
		v1alpha1.AnnotationForceOnDrainTimeout: force,
	}
}

// grant writes grant, new, recorded on the pool (passBookkeeping), to v, with the target it is for, the pool that
// issues it and the pool's lifecycle hooks, conditional on the node being
// as planned. The expectation is recorded first; if the write fails, the
// API decides whether it is kept (settle).
func (c *Controller) grant(ctx context.Context, pool *v1alpha1.UpdatePool, plan *poolPlan, v nodeView, grant string, now time.Time) error {
	set := grantAnnotations(pool, plan.target, grant, plan.releaseAtDone, c.opts.LeaderTerm)
	// The Machine's drain waits for the update from before its grant.
	if err := c.holdMachineHook(ctx, v.name); err != nil {
		return fmt.Errorf("grant %s: %w", grant, err)
	}
	// No health check takes the reboot for a failure.
	if err := c.holdRemediation(ctx, v.name); err != nil {
		return fmt.Errorf("grant %s: %w", grant, err)
	}
	c.expectations.expect(v.name, expectation{grant: grant, rv: v.rv, departs: grantDeparture(pool, v, grant)}, now)
	if err := patchNode(ctx, c.opts.Client, v.name, v.rv, set); err != nil {
		c.expectations.settle(ctx, v.name, err, now)
		return fmt.Errorf("grant %s: %w", grant, err)
	}
	c.opts.Metrics.grants.WithLabelValues(pool.Name).Inc()
	c.opts.Log.Info("slot granted", "pool", pool.Name, "node", v.name, "grant", grant, "target", plan.target)
	// On the pool only: the node's agent records the grant on the Node
	// itself (UpdateGranted), and a second Event there would be one more
	// API request per grant for the same news (#21).
	c.events.Eventf(poolRef(pool), corev1.EventTypeNormal, "SlotGranted", "%s granted (%s)", v.name, grant)
	return nil
}

// grantAnnotations is the patch of a grant: the grant with the target it
// is for and the pool that issues it, whether its agent releases it at
// Done (when the node keeps no slot after Done: the coordinator's release
// write is then not needed, #21), the pool's drain policy, and the pool's
// lifecycle hooks, stamped when the node's update starts (each hook's
// owner removes its own). term, when not nil, is the leadership the grant
// is issued in: the agent checks it against the leader Lease before it
// takes the grant.
func grantAnnotations(pool *v1alpha1.UpdatePool, target, grant string, releaseAtDone bool, term *v1alpha1.LeaderTerm) map[string]*string {
	set := coordinatorKeys(pool, target)
	set[v1alpha1.AnnotationGrant] = &grant
	set[v1alpha1.AnnotationGrantTarget] = &target
	set[v1alpha1.AnnotationGrantPool] = &pool.Name
	set[v1alpha1.AnnotationGrantTerm] = nil
	if term != nil {
		value := term.String()
		set[v1alpha1.AnnotationGrantTerm] = &value
	}
	set[v1alpha1.AnnotationReleaseAtDone] = nil
	if releaseAtDone {
		yes := "true"
		set[v1alpha1.AnnotationReleaseAtDone] = &yes
	}
	set[v1alpha1.AnnotationYieldedAt] = nil
	if hooks := pool.Spec.LifecycleHooks; hooks != nil {
		for _, h := range hooks.PreDrain {
			set[v1alpha1.PreDrainHookPrefix+h.Name] = &h.Owner
		}
		for _, h := range hooks.PreReboot {
			set[v1alpha1.PreRebootHookPrefix+h.Name] = &h.Owner
		}
	}
	return set
}

// releaseAnnotations is the patch that gives a slot back; a yield also
// records when, so the node goes to the back of the queue.
func releaseAnnotations(yielded bool, now time.Time) map[string]*string {
	set := map[string]*string{}
	for _, k := range v1alpha1.ReleaseKeys() {
		set[k] = nil
	}
	if yielded {
		at := now.UTC().Format(time.RFC3339)
		set[v1alpha1.AnnotationYieldedAt] = &at
	}
	return set
}

// grantNames names new grants: the pool's config, the time and a
// counter of this process, so that no two grants of a run share a name.
type grantNames struct {
	mu sync.Mutex
	n  int
}

// next names a new grant; it never repeats the grant the node's agent last
// reported on (avoid), so an old report cannot finish a new grant.
func (g *grantNames) next(pool *v1alpha1.UpdatePool, now time.Time, avoid string) string {
	g.mu.Lock()
	defer g.mu.Unlock()
	for {
		g.n++
		if name := GrantName(pool, now, g.n); name != avoid {
			return name
		}
	}
}

// GrantName is the name of a process's nth grant, made at now for pool:
// the pool's config first, which a canary's count reads (canaryDone).
func GrantName(pool *v1alpha1.UpdatePool, now time.Time, n int) string {
	return fmt.Sprintf("%s-%d-%d", ConfigName(pool.Spec), now.Unix(), n)
}

// release removes v's grant (and what was written with it), only if it is
// still the grant the plan saw.
func (c *Controller) release(ctx context.Context, pool *v1alpha1.UpdatePool, v nodeView, yielded bool, now time.Time) error {
	set := releaseAnnotations(yielded, now)
	rv := v.rv
	for attempt := 0; ; attempt++ {
		err := patchNode(ctx, c.opts.Client, v.name, rv, set)
		if err == nil {
			break
		}
		if !errors.Is(err, errStale) || attempt > 0 {
			return fmt.Errorf("release grant %s: %w", v.grant, err)
		}
		// Changed since planned (an agent write, a heartbeat): release
		// still, if the grant is still the one the plan saw.
		gctx, cancel := context.WithTimeout(ctx, writeTimeout)
		cur, err := c.opts.Client.Nodes().Get(gctx, v.name, metav1.GetOptions{})
		cancel()
		if err != nil {
			return fmt.Errorf("release grant %s: read node: %w", v.grant, err)
		}
		if cur.Annotations[v1alpha1.AnnotationGrant] != v.grant {
			return nil
		}
		rv = cur.ResourceVersion
	}
	c.opts.Log.Info("slot released", "pool", pool.Name, "node", v.name, "grant", v.grant, "yielded", yielded)
	reason, msg := "SlotReleased", "update finished; slot of pool "+pool.Name+" released"
	switch {
	case yielded:
		reason, msg = "SlotYielded", "the agent gave the slot of pool "+pool.Name+" back ("+v.reason+"); node queued last"
	case v.state == v1alpha1.StepDegraded:
		reason, msg = "SlotReleased", "degraded on "+v.grantTarget+"; the pool's target changed, slot of pool "+pool.Name+" released"
	}
	if reason != "SlotReleased" || v.state == v1alpha1.StepDegraded {
		// A normal release is news on the pool only: the agent's own
		// UpdateDone is on the Node already.
		c.events.Event(nodeRef(v.name), corev1.EventTypeNormal, reason, msg)
	}
	c.events.Event(poolRef(pool), corev1.EventTypeNormal, reason, v.name+": "+msg)
	return nil
}
