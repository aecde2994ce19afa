package coordinator

import (
	"context"
	"maps"
	"time"

	coordinationv1 "k8s.io/api/coordination/v1"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/fields"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/watch"
	"k8s.io/client-go/tools/cache"

	"github.com/nodeward/nodeward/api/kube"
	"github.com/nodeward/nodeward/api/v1alpha1"
)

// nodeInformer caches every Node, trimmed of what the coordinator never
// reads (trim.go) before it is cached.
func nodeInformer(opts Config, stall *kube.StallWarner) cache.SharedIndexInformer {
	return trimmedInformer(stall, cache.NewListWatchFromClient(opts.Client.CoreREST(), "nodes", metav1.NamespaceAll,
		fields.Everything()), &corev1.Node{}, trimNode)
}

// leaseInformer caches the agents' liveness Leases, trimmed.
func leaseInformer(opts Config, stall *kube.StallWarner) cache.SharedIndexInformer {
	return trimmedInformer(stall, cache.NewListWatchFromClient(opts.Client.CoordinationREST(), "leases",
		v1alpha1.AgentLeaseNamespace, fields.Everything()), &coordinationv1.Lease{}, trimLease)
}

// trimmedInformer is a plain informer of lw's objects whose transform
// drops what the coordinator never reads before it is cached.
func trimmedInformer(stall *kube.StallWarner, lw cache.ListerWatcher, obj runtime.Object, trim cache.TransformFunc) cache.SharedIndexInformer {
	informer := cache.NewSharedIndexInformer(stall.ListerWatcher(lw), obj, 0, cache.Indexers{})
	// SetTransform fails only on an informer already started; this one
	// starts in Run.
	_ = informer.SetTransform(trim)
	return informer
}

// poolInformer caches the pools the coordinator's selector picks: a plain
// informer on the dynamic client too, as the dynamic informer factory
// imports the typed informers of every group.
func poolInformer(opts Config, stall *kube.StallWarner) cache.SharedIndexInformer {
	poolAPI := opts.Dynamic.Resource(v1alpha1.UpdatePoolResource())
	return cache.NewSharedIndexInformer(stall.ListerWatcher(&cache.ListWatch{
		ListWithContextFunc: func(ctx context.Context, o metav1.ListOptions) (runtime.Object, error) {
			o.LabelSelector = opts.PoolLabelSelector
			return poolAPI.List(ctx, o)
		},
		WatchFuncWithContext: func(ctx context.Context, o metav1.ListOptions) (watch.Interface, error) {
			o.LabelSelector = opts.PoolLabelSelector
			return poolAPI.Watch(ctx, o)
		},
	}), &unstructured.Unstructured{}, 0, cache.Indexers{})
}

// addHandlers connects the informers to the index and the queue. An update
// re-plans only when it can change a plan. At 10,000 nodes the agents renew
// 125 Leases a second and a pass takes 4.4 ms in BenchmarkPlanPass, several
// times that in the running process (docs/benchmarks.md): re-planning on
// each renewal, or on the pool status this controller writes every second,
// would keep the one worker busy and delay the grant after a slot frees.
func (c *Controller) addHandlers() {
	// AddEventHandler fails only on a stopped informer; these have not
	// started. The index's Node handler checks expectations and enqueues
	// after it updates the index (nodeIndex: ordering).
	var nodeHandler cache.ResourceEventHandler = c.index.nodeHandler(c.nodeDeleted, c.onNode)
	if c.opts.nodeEvents != nil {
		nodeHandler = c.opts.nodeEvents(nodeHandler)
	}
	nodeReg, _ := c.nodes.AddEventHandler(nodeHandler)
	leaseReg, _ := c.leases.AddEventHandler(c.index.leaseHandler(func(old, cur *coordinationv1.Lease) {
		if old == nil || cur == nil || leaseLivenessChange(old, cur, c.opts.Now()) {
			c.enqueuePools()
		}
	}))
	c.indexSynced = []cache.InformerSynced{nodeReg.HasSynced, leaseReg.HasSynced}
	enqueueAll := func(any) { c.retainObjectWatches(); c.enqueuePools() }
	_, _ = c.pools.AddEventHandler(cache.ResourceEventHandlerFuncs{
		AddFunc: enqueueAll,
		UpdateFunc: func(o, n any) {
			if poolPlanChange(o, n) {
				enqueueAll(n)
			}
		},
		DeleteFunc: enqueueAll,
	})
}

// nodeDeleted runs with a deleted Node before the index drops it: the
// node departs if a grant written to it is still expected (the grant
// landed or its write's outcome is unknown: the deleted object, maybe a
// relist's tombstone carrying the cached copy, need not show it), or if
// the object shows an unfinished grant. The expectation is dropped after
// (onNode, expectations: ordering).
func (c *Controller) nodeDeleted(n *corev1.Node) {
	now := c.opts.Now()
	if exp, ok := c.expectations.get(n.Name); ok {
		c.departures.expected(n.Name, exp, now)
		return
	}
	c.departures.record(n, c.machines.keyOf(n.Name), now)
}

// leaseLivenessChange reports whether a Lease update changes whether its
// agent counts as alive now. A renewal of a live Lease does not; a Lease
// that expires without an update is caught by the resync.
func leaseLivenessChange(old, cur *coordinationv1.Lease, now time.Time) bool {
	return leaseAlive(old, now) != leaseAlive(cur, now)
}

// poolPlanChange reports whether a pool update can change its plan: its
// spec (generation), labels (the coordinator's pool selector), annotations
// (a halt, an acknowledgement) or deletion; a status write cannot.
func poolPlanChange(oldObj, newObj any) bool {
	o, ok1 := oldObj.(*unstructured.Unstructured)
	n, ok2 := newObj.(*unstructured.Unstructured)
	return !ok1 || !ok2 || o.GetUID() != n.GetUID() || o.GetGeneration() != n.GetGeneration() ||
		!maps.Equal(o.GetLabels(), n.GetLabels()) || !maps.Equal(o.GetAnnotations(), n.GetAnnotations()) ||
		(o.GetDeletionTimestamp() == nil) != (n.GetDeletionTimestamp() == nil)
}

// onNode runs for each node event once the index holds it: it checks the
// expectation the event may satisfy, then re-plans the pools unless the
// event is an update that cannot change a plan (the coordinator's own
// annotation writes and status heartbeats cannot, and skipping them keeps
// the queue free for the events that free a slot). Every pool is
// enqueued: the queue folds duplicates, and a pool's plan is linear in the
// nodes, so an event costs O(pools + nodes), never O(N²).
func (c *Controller) onNode(old, cur *corev1.Node) {
	if cur != nil {
		c.expectations.observe(cur.Name)
		c.departures.returned(cur)
	} else {
		c.expectations.observe(old.Name)
	}
	if old != nil && cur != nil && !planRelevantChange(old, cur) {
		return
	}
	c.enqueuePools()
}

func (c *Controller) enqueuePools() {
	for _, key := range c.pools.GetStore().ListKeys() {
		c.queue.Add(key)
	}
}
