package coordinator

import (
	"time"

	"k8s.io/client-go/tools/cache"

	"github.com/nodeward/nodeward/api/v1alpha1"
	"github.com/nodeward/nodeward/objectgate"
)

// ObjectWatches lists the (resource, namespace) the object gates watch.
func (c *Controller) ObjectWatches() []objectgate.Key {
	return c.objectGates.Watches.Running()
}

// SetTestHooks installs the reconcile hooks of Config (see there).
func SetTestHooks(o *Config, betweenReads func(*v1alpha1.UpdatePool, time.Time), planned func(pool string, unavailable map[string]string)) {
	o.betweenReads, o.planned = betweenReads, planned
}

// Expectations returns the grants written but not yet observed, by node.
func (c *Controller) Expectations() map[string]string {
	return c.expectations.grants()
}

// CachedGrant is the grant annotation of node in the controller's node
// index, which its passes read.
func (c *Controller) CachedGrant(node string) string {
	if n := c.index.node(node); n != nil {
		return n.Annotations[v1alpha1.AnnotationGrant]
	}
	return ""
}

// SetNodeEventsHook wraps the node index's handler of the Node informer's
// events in wrap's, which may withhold or rewrite them.
func SetNodeEventsHook(o *Config, wrap func(cache.ResourceEventHandler) cache.ResourceEventHandler) {
	o.nodeEvents = wrap
}
