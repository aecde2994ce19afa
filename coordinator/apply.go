package coordinator

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"time"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"

	"github.com/nodeward/nodeward/api/kube"
	"github.com/nodeward/nodeward/api/v1alpha1"
)

// writeTimeout bounds each node write and each check of the API.
const writeTimeout = 10 * time.Second

// errStale marks a write refused because the node changed since the plan
// read it: the node's event re-plans the pool; no backoff, no alarm.
var errStale = errors.New("node changed since it was planned")

// staleError is the API server's conflict, which is errStale.
type staleError struct{ err error }

func (e staleError) Error() string        { return errStale.Error() + ": " + e.err.Error() }
func (e staleError) Unwrap() error        { return e.err }
func (e staleError) Is(target error) bool { return target == errStale }

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

// apply writes a plan: the stale targets, then the grants, then the
// releases. A node whose write fails does not stop the others: its error
// is logged, reported as an Event on the pool, the node backs off, and the
// errors are returned together so the pool is requeued with backoff.
func (c *Controller) apply(ctx context.Context, pool *v1alpha1.UpdatePool, plan *poolPlan, in planInput) error {
	views := planned(plan, in.nodes)
	var errs []error
	result := func(node, what string, err error) {
		switch {
		case err == nil:
			c.writeOK(node)
		case errors.Is(err, errStale):
			c.opts.Log.Debug("node changed since planned", "pool", pool.Name, "node", node, "write", what)
			errs = append(errs, err)
		default:
			c.writeFailed(node, in.now)
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
	// Grants go out before the releases of the same plan: a released node
	// was counted as it serves without its grant, so the release is
	// bookkeeping that need not delay the next node.
	for _, n := range plan.grant {
		result(n, "grant", c.grant(ctx, pool, plan, views[n], in.now))
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

// grant writes a new grant to v, with the target it is for, the pool that
// issues it and the pool's lifecycle hooks, conditional on the node being
// as planned. The expectation is recorded first; if the write fails, the
// API decides whether it is kept (settle).
func (c *Controller) grant(ctx context.Context, pool *v1alpha1.UpdatePool, plan *poolPlan, v nodeView, now time.Time) error {
	grant := c.nextGrant(pool, now, v.stateGrnt)
	set := grantAnnotations(pool, plan.target, grant, plan.releaseAtDone)
	c.expect(v.name, grant, v.rv, now)
	if err := patchNode(ctx, c.opts.Client, v.name, v.rv, set); err != nil {
		c.settle(ctx, v.name, err, now)
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
// owner removes its own).
func grantAnnotations(pool *v1alpha1.UpdatePool, target, grant string, releaseAtDone bool) map[string]*string {
	set := coordinatorKeys(pool, target)
	set[v1alpha1.AnnotationGrant] = &grant
	set[v1alpha1.AnnotationGrantTarget] = &target
	set[v1alpha1.AnnotationGrantPool] = &pool.Name
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

// nextGrant names a new grant; it never repeats the grant the node's agent
// last reported on, so an old report cannot finish a new grant.
func (c *Controller) nextGrant(pool *v1alpha1.UpdatePool, now time.Time, avoid string) string {
	c.mu.Lock()
	defer c.mu.Unlock()
	for {
		c.grantN++
		g := fmt.Sprintf("%s-%d-%d", ConfigName(pool.Spec), now.Unix(), c.grantN)
		if g != avoid {
			return g
		}
	}
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

// patchNode merge-patches node's annotations, conditional on rv when set:
// a node changed since is errStale.
func patchNode(ctx context.Context, client *kube.Client, node, rv string, set map[string]*string) error {
	meta := map[string]any{"annotations": set}
	if rv != "" {
		meta["resourceVersion"] = rv
	}
	patch, err := json.Marshal(map[string]any{"metadata": meta})
	if err != nil {
		return fmt.Errorf("encode annotations for node %s: %w", node, err)
	}
	ctx, cancel := context.WithTimeout(ctx, writeTimeout)
	defer cancel()
	_, err = client.Nodes().Patch(ctx, node, types.MergePatchType, patch, metav1.PatchOptions{})
	switch {
	case apierrors.IsConflict(err):
		return fmt.Errorf("patch annotations of node %s: %w", node, staleError{err})
	case err != nil:
		return fmt.Errorf("patch annotations of node %s: %w", node, err)
	}
	return nil
}

// writeFailed backs node off: its writes are skipped and it is not granted
// for 1 s, doubling with each failure up to 5 min.
func (c *Controller) writeFailed(node string, now time.Time) {
	c.mu.Lock()
	defer c.mu.Unlock()
	f := c.failures[node]
	f.count++
	f.until = now.Add(min(time.Second<<min(f.count-1, 9), 5*time.Minute))
	c.failures[node] = f
}

func (c *Controller) writeOK(node string) {
	c.mu.Lock()
	defer c.mu.Unlock()
	delete(c.failures, node)
}

// backingOff returns the nodes backing off at now.
func (c *Controller) backingOff(now time.Time) map[string]bool {
	c.mu.Lock()
	defer c.mu.Unlock()
	out := map[string]bool{}
	for n, f := range c.failures {
		if now.Before(f.until) {
			out[n] = true
		}
	}
	return out
}

// nextRetry is how long until the first backoff ends (0: none).
func (c *Controller) nextRetry(now time.Time) time.Duration {
	c.mu.Lock()
	defer c.mu.Unlock()
	var next time.Duration
	for _, f := range c.failures {
		if d := f.until.Sub(now); d > 0 && (next == 0 || d < next) {
			next = d
		}
	}
	return next
}

func poolRef(pool *v1alpha1.UpdatePool) *corev1.ObjectReference {
	return &corev1.ObjectReference{APIVersion: v1alpha1.GroupName + "/" + v1alpha1.Version, Kind: "UpdatePool",
		Name: pool.Name, UID: pool.UID}
}

// nodeRef references a Node for Events; Node events live in "default"
// as the kubelet's do.
func nodeRef(name string) *corev1.ObjectReference {
	return &corev1.ObjectReference{APIVersion: "v1", Kind: "Node", Name: name, UID: types.UID(name)}
}
