package coordinator

// A planned reboot never looks like a failure to a MachineHealthCheck.
//
// The health check judges a node by its conditions alone: Ready Unknown or
// False for longer than its timeout and the Machine is deleted, however
// the node came to be down. A reboot for an update takes the node's Ready
// to Unknown for as long as the machine boots, often longer than the short
// timeouts health checks are given; no timeout nodeward could pick keeps
// every reboot inside every health check's tolerance. So nodeward holds
// remediation, as each Machine API allows, from before a node's grant
// until its update ends:
//
//   - Cluster API: the Machine carries cluster.x-k8s.io/skip-remediation,
//     which its health check honours for that Machine alone;
//   - OpenShift's Machine API has no such mark per Machine: the health
//     checks that judge the Machine are paused (cluster.x-k8s.io/paused),
//     the whole of each, which is what its documentation tells operators
//     to do by hand before they update.
//
// Each mark carries nodeward's value and only that value is ever removed:
// a health check paused or a Machine skipped by someone else stays as
// they left it. The marks go the way of the pre-drain hook: written before
// the grant, dropped by a sweep once no node they cover updates, whatever
// crashed in between.

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/client-go/dynamic"
)

// SkipRemediationAnnotation is Cluster API's mark of a Machine its health
// check must not remediate.
const SkipRemediationAnnotation = "cluster.x-k8s.io/skip-remediation"

// remediationHoldStyle is how one Machine API lets nodeward keep health
// checks from remediating a Machine.
type remediationHoldStyle interface {
	// hold marks Machine r before its node's grant.
	hold(ctx context.Context, c *Controller, r machineRecord) error
	// sweep removes nodeward's marks that no updating node needs; busy
	// reports whether a node is mid-update.
	sweep(ctx context.Context, c *Controller, busy func(node string) bool)
}

// holdRemediation marks node's Machine before its grant is written. A node
// without a Machine needs nothing. An error means no grant.
func (c *Controller) holdRemediation(ctx context.Context, node string) error {
	r, ok := c.machines.machineOf(node)
	if !ok {
		return nil
	}
	if err := machineAPINamed(r.api).remediationHold.hold(ctx, c, r); err != nil {
		return fmt.Errorf("hold remediation of machine %s/%s: %w", r.namespace, r.name, err)
	}
	return nil
}

// sweepRemediationHolds drops nodeward's marks whose updates ended.
func (c *Controller) sweepRemediationHolds(ctx context.Context, busy func(node string) bool) {
	for _, api := range machineAPIs {
		api.remediationHold.sweep(ctx, c, busy)
	}
}

// skippedRemediation is Cluster API's per-Machine mark.
type skippedRemediation struct{}

func (skippedRemediation) hold(ctx context.Context, c *Controller, r machineRecord) error {
	api := c.machineResource(r)
	m, err := api.Get(ctx, r.name, metav1.GetOptions{})
	if err != nil {
		return err
	}
	if _, marked := m.GetAnnotations()[SkipRemediationAnnotation]; marked {
		return nil // ours already, or someone else's: skipped either way
	}
	return annotate(ctx, api, m, SkipRemediationAnnotation, RemediationHoldValue)
}

func (skippedRemediation) sweep(ctx context.Context, c *Controller, busy func(string) bool) {
	for _, r := range c.machines.where(func(r machineRecord) bool { return r.skipped }) {
		if busy(r.node) {
			continue
		}
		api := c.machineResource(r)
		if err := unannotateFresh(ctx, api, r.name, SkipRemediationAnnotation); err != nil {
			c.opts.Log.Warn("cannot let the health check judge a machine whose update ended", "machine", r.namespace+"/"+r.name, "err", err)
			continue
		}
		c.opts.Log.Info("remediation resumed: the node's update ended", "machine", r.namespace+"/"+r.name, "node", r.node)
	}
}

// pausedHealthChecks is OpenShift's: the health checks judging the
// Machine are paused whole.
type pausedHealthChecks struct{}

func (pausedHealthChecks) hold(ctx context.Context, c *Controller, r machineRecord) error {
	gvr := c.healthChecks.servedAs(r.api)
	if gvr.Resource == "" {
		return nil // no health checks served
	}
	// Listed, not read from the informer: a health check created a moment
	// ago judges this reboot too.
	api := c.opts.Dynamic.Resource(gvr).Namespace(r.namespace)
	list, err := api.List(ctx, metav1.ListOptions{})
	if err != nil {
		return fmt.Errorf("list health checks: %w", err)
	}
	for i := range list.Items {
		m := &list.Items[i]
		h := healthCheckOf(r.api, m)
		if !h.judges(r) || h.paused {
			continue // not judging it, or paused already (by nodeward or anyone)
		}
		if err := annotate(ctx, api, m, PausedAnnotation, RemediationHoldValue); err != nil {
			return fmt.Errorf("pause health check %s/%s: %w", h.namespace, h.name, err)
		}
		c.opts.Log.Info("health check paused: a node it judges is about to update", "healthcheck", h.namespace+"/"+h.name, "node", r.node)
	}
	return nil
}

func (pausedHealthChecks) sweep(ctx context.Context, c *Controller, busy func(string) bool) {
	for _, h := range c.healthChecks.pausedByNodeward() {
		judged := c.machines.where(func(r machineRecord) bool { return h.judges(r) && busy(r.node) })
		if len(judged) > 0 {
			continue
		}
		api := c.opts.Dynamic.Resource(c.healthChecks.servedAs(h.api)).Namespace(h.namespace)
		if err := unannotateFresh(ctx, api, h.name, PausedAnnotation); err != nil {
			c.opts.Log.Warn("cannot resume a health check nodeward paused", "healthcheck", h.namespace+"/"+h.name, "err", err)
			continue
		}
		c.opts.Log.Info("health check resumed: no node it judges updates", "healthcheck", h.namespace+"/"+h.name)
	}
}

// annotate adds key=value to obj's annotations by a JSON patch that tests
// obj's resourceVersion (patchAt): an object changed since it was read is
// left alone, and the caller's next pass reads it again.
func annotate(ctx context.Context, api dynamic.ResourceInterface, obj *unstructured.Unstructured, key, value string) error {
	op := map[string]any{"op": "add", "path": "/metadata/annotations/" + jsonPointerEscape(key), "value": value}
	if obj.GetAnnotations() == nil {
		op = map[string]any{"op": "add", "path": "/metadata/annotations", "value": map[string]any{key: value}}
	}
	return patchAt(ctx, api, obj, op)
}

// unannotateFresh removes key from the named object's annotations if it
// still holds nodeward's value, by a JSON patch that tests the
// resourceVersion read.
func unannotateFresh(ctx context.Context, api dynamic.ResourceInterface, name, key string) error {
	obj, err := api.Get(ctx, name, metav1.GetOptions{})
	if err != nil {
		return err
	}
	value, ok := obj.GetAnnotations()[key]
	if !ok {
		return nil
	}
	if value != RemediationHoldValue {
		return errors.New(key + " is no longer nodeward's: left as it is")
	}
	return patchAt(ctx, api, obj, map[string]any{"op": "remove", "path": "/metadata/annotations/" + jsonPointerEscape(key)})
}

// jsonPointerEscape escapes a key for a JSON pointer (RFC 6901).
func jsonPointerEscape(key string) string {
	return strings.NewReplacer("~", "~0", "/", "~1").Replace(key)
}

// machineSweepEvery spaces the sweeps of the marks on Machines and health
// checks whose updates ended.
const machineSweepEvery = 2 * time.Second

// sweepMachines drops nodeward's pre-drain hooks and remediation holds that
// no update needs any more, every machineSweepEvery. It runs in the worker,
// between passes: never between a mark written and its grant.
func (c *Controller) sweepMachines(ctx context.Context, now time.Time) {
	if now.Sub(c.machinesSwept) < machineSweepEvery {
		return
	}
	c.machinesSwept = now
	busy := c.updateBusy()
	c.sweepMachineHooks(ctx, busy)
	c.sweepRemediationHolds(ctx, busy)
}
