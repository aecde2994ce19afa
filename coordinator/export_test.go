package coordinator

import (
	corev1 "k8s.io/api/core/v1"

	"github.com/nodeward/nodeward/api/v1alpha1"
)

// SetTestHooks installs the reconcile hooks of Options (see there).
func SetTestHooks(o *Options, betweenReads func(*v1alpha1.UpdatePool), planned func(pool string, unavailable map[string]string)) {
	o.betweenReads, o.planned = betweenReads, planned
}

// Expectations returns the grants written but not yet observed, by node.
func (c *Controller) Expectations() map[string]string {
	c.mu.Lock()
	defer c.mu.Unlock()
	out := map[string]string{}
	for n, e := range c.pending {
		out[n] = e.grant
	}
	return out
}

// CachedGrant is the grant annotation of node in the controller's cache.
func (c *Controller) CachedGrant(node string) string {
	obj, ok, err := c.nodes.GetStore().GetByKey(node)
	if err != nil || !ok {
		return ""
	}
	return obj.(*corev1.Node).Annotations[v1alpha1.AnnotationGrant]
}
