package coordinator

import (
	"context"
	"encoding/json"
	"fmt"
	"log/slog"
	"sync"
	"time"

	coordinationv1 "k8s.io/api/coordination/v1"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/fields"
	"k8s.io/apimachinery/pkg/labels"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/apimachinery/pkg/watch"
	"k8s.io/client-go/dynamic"
	"k8s.io/client-go/tools/cache"
	"k8s.io/client-go/tools/record"
	"k8s.io/client-go/util/workqueue"

	"github.com/nodeward/nodeward/api/kube"
	"github.com/nodeward/nodeward/api/v1alpha1"
)

// Options configure a Controller.
type Options struct {
	Client  *kube.Client
	Dynamic dynamic.Interface
	Log     *slog.Logger
	// Now is the clock; time.Now when nil (tests inject one for
	// maintenance windows).
	Now func() time.Time
	// Resync re-plans every pool this often, which catches expiring agent
	// Leases and opening maintenance windows. Default 5 s.
	Resync  time.Duration
	Metrics *Metrics
	// GuardRateInterval is how often a rate-limited zone (over 50 nodes,
	// 55% or more unhealthy) may let one more node take a NoExecute taint.
	// Default 100 s (the node lifecycle controller's 0.01 nodes/s).
	GuardRateInterval time.Duration
	// DisableGuard stops publishing the disruption guard (coordinators
	// sharing a cluster by PoolLabelSelector let only one publish it).
	DisableGuard bool
	// PoolLabelSelector restricts the coordinator to the pools it selects
	// (empty: all). Two coordinators must never share a pool; this lets
	// tests run one coordinator per scenario on one cluster.
	PoolLabelSelector string
}

// statusInterval bounds how often a pool's status is written.
const statusInterval = time.Second

// Controller grants update slots. Run it only while holding leadership.
type Controller struct {
	opts    Options
	queue   workqueue.TypedRateLimitingInterface[string]
	nodes   cache.SharedIndexInformer
	leases  cache.SharedIndexInformer
	pools   cache.SharedIndexInformer
	mu      sync.Mutex
	pending map[string]string // node → grant written, not yet in the cache
	grantN  int
	events  record.EventRecorder
	// statusWritten is when each pool's status was last written.
	statusWritten map[string]time.Time
	// guardGrownAt is when a rate-limited zone last gained a permit.
	guardGrownAt time.Time
	stopEvents   func()
}

// New builds a controller; Run starts it.
func New(opts Options) *Controller {
	if opts.Now == nil {
		opts.Now = time.Now
	}
	if opts.Resync == 0 {
		opts.Resync = 5 * time.Second
	}
	if opts.Log == nil {
		opts.Log = slog.Default()
	}
	if opts.GuardRateInterval == 0 {
		opts.GuardRateInterval = 100 * time.Second
	}
	if opts.Metrics == nil {
		opts.Metrics = NewMetrics(nil)
	}
	// Plain informers rather than client-go's informer factory, whose
	// ForResource links the informers and listers of every API group.
	nodes := cache.NewSharedIndexInformer(
		cache.NewListWatchFromClient(opts.Client.CoreREST(), "nodes", metav1.NamespaceAll, fields.Everything()),
		&corev1.Node{}, 0, cache.Indexers{})
	leases := cache.NewSharedIndexInformer(
		cache.NewListWatchFromClient(opts.Client.CoordinationREST(), "leases", v1alpha1.AgentLeaseNamespace, fields.Everything()),
		&coordinationv1.Lease{}, 0, cache.Indexers{})
	// The pools' informer is a plain one on the dynamic client too: the
	// dynamic informer factory imports the typed informers of every group.
	poolAPI := opts.Dynamic.Resource(v1alpha1.UpdatePoolResource())
	pools := cache.NewSharedIndexInformer(&cache.ListWatch{
		ListWithContextFunc: func(ctx context.Context, o metav1.ListOptions) (runtime.Object, error) {
			o.LabelSelector = opts.PoolLabelSelector
			return poolAPI.List(ctx, o)
		},
		WatchFuncWithContext: func(ctx context.Context, o metav1.ListOptions) (watch.Interface, error) {
			o.LabelSelector = opts.PoolLabelSelector
			return poolAPI.Watch(ctx, o)
		},
	}, &unstructured.Unstructured{}, 0, cache.Indexers{})
	c := &Controller{
		opts:          opts,
		queue:         workqueue.NewTypedRateLimitingQueue(workqueue.DefaultTypedControllerRateLimiter[string]()),
		nodes:         nodes,
		leases:        leases,
		pools:         pools,
		pending:       map[string]string{},
		statusWritten: map[string]time.Time{},
	}
	broadcaster := record.NewBroadcaster()
	broadcaster.StartRecordingToSink(opts.Client.EventSink(context.Background()))
	c.events = broadcaster.NewRecorder(runtime.NewScheme(), corev1.EventSource{Component: "nodeward-coordinator"})
	c.stopEvents = broadcaster.Shutdown
	enqueueAll := func(any) { c.enqueuePools() }
	handler := cache.ResourceEventHandlerFuncs{
		AddFunc:    enqueueAll,
		UpdateFunc: func(_, n any) { enqueueAll(n) },
		DeleteFunc: enqueueAll,
	}
	_, _ = c.nodes.AddEventHandler(cache.ResourceEventHandlerFuncs{
		AddFunc:    c.onNode,
		UpdateFunc: c.onNodeUpdate,
		DeleteFunc: c.onNode,
	})
	_, _ = c.leases.AddEventHandler(handler)
	_, _ = c.pools.AddEventHandler(handler)
	return c
}

// onNode drops the expectation a node event satisfies and re-plans the
// pools. Every pool is enqueued: the queue folds duplicates, and a pool's
// plan is linear in its nodes, so an event costs O(pools + nodes of the
// pools), never O(N²).
func (c *Controller) onNode(obj any) {
	if node, ok := obj.(*corev1.Node); ok {
		c.forgetExpectation(node)
	}
	c.enqueuePools()
}

// onNodeUpdate re-plans only when the update can change a plan: the
// coordinator's own annotation writes and status heartbeats cannot, and
// skipping them keeps the queue free for the events that free a slot.
func (c *Controller) onNodeUpdate(oldObj, newObj any) {
	oldNode, ok1 := oldObj.(*corev1.Node)
	newNode, ok2 := newObj.(*corev1.Node)
	if ok1 && ok2 && !planRelevantChange(oldNode, newNode) {
		c.forgetExpectation(newNode)
		return
	}
	c.onNode(newObj)
}

func (c *Controller) forgetExpectation(node *corev1.Node) {
	c.mu.Lock()
	defer c.mu.Unlock()
	if g, ok := c.pending[node.Name]; ok && node.Annotations[v1alpha1.AnnotationGrant] == g {
		delete(c.pending, node.Name)
	}
}

func (c *Controller) enqueuePools() {
	for _, key := range c.pools.GetStore().ListKeys() {
		c.queue.Add(key)
	}
}

// Run syncs the caches from a fresh list (so a new leader sees every grant
// its predecessor wrote), then reconciles until ctx ends.
func (c *Controller) Run(ctx context.Context) error {
	defer c.queue.ShutDown()
	defer c.stopEvents()
	go c.nodes.RunWithContext(ctx)
	go c.leases.RunWithContext(ctx)
	go c.pools.RunWithContext(ctx)
	if !cache.WaitForCacheSync(ctx.Done(), c.nodes.HasSynced, c.leases.HasSynced, c.pools.HasSynced) {
		return fmt.Errorf("sync caches: %w", ctx.Err())
	}
	c.opts.Log.Info("coordinator caches synced", "nodes", len(c.nodes.GetStore().ListKeys()),
		"pools", len(c.pools.GetStore().ListKeys()))
	go func() {
		t := time.NewTicker(c.opts.Resync)
		defer t.Stop()
		for {
			select {
			case <-ctx.Done():
				return
			case <-t.C:
				c.enqueuePools()
				if !c.opts.DisableGuard {
					if err := c.publishGuard(ctx, c.opts.Now()); err != nil {
						c.opts.Log.Error("publish disruption guard", "err", err)
					}
				}
			}
		}
	}()
	c.enqueuePools()
	go func() { <-ctx.Done(); c.queue.ShutDown() }()
	for c.processNext(ctx) {
	}
	return nil
}

func (c *Controller) processNext(ctx context.Context) bool {
	key, quit := c.queue.Get()
	if quit {
		return false
	}
	defer c.queue.Done(key)
	if err := c.reconcile(ctx, key); err != nil {
		c.opts.Log.Error("reconcile pool", "pool", key, "err", err)
		c.queue.AddRateLimited(key)
		return true
	}
	c.queue.Forget(key)
	return true
}

func (c *Controller) pool(key string) (*v1alpha1.UpdatePool, error) {
	obj, exists, err := c.pools.GetStore().GetByKey(key)
	if err != nil || !exists {
		return nil, err
	}
	var pool v1alpha1.UpdatePool
	if err := runtime.DefaultUnstructuredConverter.FromUnstructured(obj.(*unstructured.Unstructured).Object, &pool); err != nil {
		return nil, fmt.Errorf("decode UpdatePool %s: %w", key, err)
	}
	return &pool, nil
}

// leaseOK reports whether node's agent renewed its Lease within the
// Lease's duration.
func (c *Controller) leaseOK(node string, now time.Time) bool {
	obj, exists, _ := c.leases.GetStore().GetByKey(v1alpha1.AgentLeaseNamespace + "/" + v1alpha1.AgentLeaseName(node))
	if !exists {
		return false
	}
	spec := obj.(*coordinationv1.Lease).Spec
	if spec.RenewTime == nil {
		return false
	}
	d := time.Duration(v1alpha1.AgentLeaseDurationSeconds) * time.Second
	if spec.LeaseDurationSeconds != nil {
		d = time.Duration(*spec.LeaseDurationSeconds) * time.Second
	}
	return now.Before(spec.RenewTime.Add(d))
}

// poolNodes selects the pool's nodes and reports nodes that another pool
// selects too; those are never granted.
func (c *Controller) poolNodes(pool *v1alpha1.UpdatePool) ([]*corev1.Node, []string, error) {
	sel, err := metav1.LabelSelectorAsSelector(pool.Spec.NodeSelector)
	if err != nil {
		return nil, nil, fmt.Errorf("pool %s nodeSelector: %w", pool.Name, err)
	}
	var others []labels.Selector
	for _, key := range c.pools.GetStore().ListKeys() {
		if key == pool.Name {
			continue
		}
		other, err := c.pool(key)
		if err != nil || other == nil {
			continue
		}
		if s, err := metav1.LabelSelectorAsSelector(other.Spec.NodeSelector); err == nil {
			others = append(others, s)
		}
	}
	var nodes []*corev1.Node
	var overlapping []string
	for _, obj := range c.nodes.GetStore().List() {
		n := obj.(*corev1.Node)
		set := labels.Set(n.Labels)
		if !sel.Matches(set) {
			continue
		}
		shared := false
		for _, o := range others {
			if o.Matches(set) {
				shared = true
				break
			}
		}
		if shared {
			overlapping = append(overlapping, n.Name)
			continue
		}
		nodes = append(nodes, n)
	}
	return nodes, overlapping, nil
}

func (c *Controller) reconcile(ctx context.Context, key string) error {
	pool, err := c.pool(key)
	if err != nil || pool == nil {
		return err
	}
	now := c.opts.Now()
	nodes, overlapping, err := c.poolNodes(pool)
	if err != nil {
		return err
	}
	views := make([]nodeView, 0, len(nodes))
	var silent []*corev1.Node
	for _, n := range nodes {
		ok := c.leaseOK(n.Name, now)
		if !ok {
			silent = append(silent, n)
		}
		views = append(views, viewNode(n, ok, pool.Spec.OSImage))
	}
	c.mu.Lock()
	pending := make(map[string]bool, len(c.pending))
	for n := range c.pending {
		pending[n] = true
	}
	c.mu.Unlock()
	plan, err := planPool(pool, views, pending, now)
	if err != nil {
		return fmt.Errorf("plan pool %s: %w", pool.Name, err)
	}
	for _, n := range silent {
		marked, err := markHealthUnknown(ctx, c.opts.Client, n, now)
		if err != nil {
			return err
		}
		if marked {
			c.events.Event(nodeRef(n.Name), corev1.EventTypeWarning, "AgentSilent",
				"nodeward agent stopped renewing its liveness Lease; its health conditions are now Unknown and the node is not granted")
		}
	}
	if err := c.apply(ctx, pool, plan, now); err != nil {
		return err
	}
	c.opts.Metrics.observe(pool.Name, plan)
	// Status is written at most once per statusInterval per pool: it
	// changes with every grant, and writing it on the path from a freed
	// slot to the next grant would delay the grant. A later reconcile
	// (queued below) writes what is pending.
	c.mu.Lock()
	wait := c.statusWritten[key].Add(statusInterval).Sub(now)
	c.mu.Unlock()
	if wait > 0 {
		c.queue.AddAfter(key, wait)
		return nil
	}
	written, err := c.writeStatus(ctx, pool, plan, len(views), overlapping)
	if written {
		c.mu.Lock()
		c.statusWritten[key] = now
		c.mu.Unlock()
	}
	return err
}

func (c *Controller) apply(ctx context.Context, pool *v1alpha1.UpdatePool, plan *poolPlan, now time.Time) error {
	poolRef := &corev1.ObjectReference{APIVersion: v1alpha1.GroupName + "/" + v1alpha1.Version, Kind: "UpdatePool",
		Name: pool.Name, UID: pool.UID}
	coordinatorKeys := func() map[string]*string {
		m := map[string]*string{v1alpha1.AnnotationTarget: &plan.target}
		if d := pool.Spec.Drain; d != nil {
			if d.Timeout != "" {
				m[v1alpha1.AnnotationDrainTimeout] = &d.Timeout
			}
			yield, force := fmt.Sprint(d.OnTimeout == "Yield"), fmt.Sprint(d.OnTimeout == "Force")
			m[v1alpha1.AnnotationYieldOnDrainTimeout] = &yield
			m[v1alpha1.AnnotationForceOnDrainTimeout] = &force
		}
		return m
	}
	for _, n := range plan.setTarget {
		if err := patchNodeAnnotations(ctx, c.opts.Client, n, coordinatorKeys()); err != nil {
			return err
		}
	}
	// Grants go out before the releases of the same plan: a node whose agent
	// reported Done for its grant is back in service (uncordoned, healthy),
	// so its slot is already free; removing its grant annotation is
	// bookkeeping that need not delay the next node.
	for _, n := range plan.grant {
		c.mu.Lock()
		c.grantN++
		grant := fmt.Sprintf("%s-%d-%d", ConfigName(pool.Spec), now.Unix(), c.grantN)
		c.pending[n] = grant
		c.mu.Unlock()
		set := coordinatorKeys()
		set[v1alpha1.AnnotationGrant] = &grant
		set[v1alpha1.AnnotationGrantTarget] = &plan.target
		set[v1alpha1.AnnotationYieldedAt] = nil
		// The pool's lifecycle hooks are stamped with the grant, when the
		// node's update starts; each hook's owner removes its own.
		if hooks := pool.Spec.LifecycleHooks; hooks != nil {
			for _, h := range hooks.PreDrain {
				set[v1alpha1.PreDrainHookPrefix+h.Name] = &h.Owner
			}
			for _, h := range hooks.PreReboot {
				set[v1alpha1.PreRebootHookPrefix+h.Name] = &h.Owner
			}
		}
		if err := patchNodeAnnotations(ctx, c.opts.Client, n, set); err != nil {
			// The grant may or may not have landed: keep the expectation
			// until the cache shows the node, erring on the safe side.
			return err
		}
		c.opts.Metrics.grants.WithLabelValues(pool.Name).Inc()
		c.opts.Log.Info("slot granted", "pool", pool.Name, "node", n, "grant", grant)
		c.events.Eventf(nodeRef(n), corev1.EventTypeNormal, "SlotGranted", "update slot %s of pool %s granted", grant, pool.Name)
		c.events.Eventf(poolRef, corev1.EventTypeNormal, "SlotGranted", "%s granted (%s)", n, grant)
	}
	yielded := map[string]bool{}
	for _, n := range plan.yielded {
		yielded[n] = true
	}
	for _, n := range plan.release {
		set := map[string]*string{v1alpha1.AnnotationGrant: nil, v1alpha1.AnnotationGrantTarget: nil}
		if yielded[n] {
			at := now.UTC().Format(time.RFC3339)
			set[v1alpha1.AnnotationYieldedAt] = &at
		}
		if err := patchNodeAnnotations(ctx, c.opts.Client, n, set); err != nil {
			return err
		}
		c.opts.Log.Info("slot released", "pool", pool.Name, "node", n, "yielded", yielded[n])
		reason, msg := "SlotReleased", "update finished; slot of pool "+pool.Name+" released"
		if yielded[n] {
			reason, msg = "SlotYielded", "drain blocked past its timeout; slot of pool "+pool.Name+" given back, node queued last"
		}
		c.events.Event(nodeRef(n), corev1.EventTypeNormal, reason, msg)
		c.events.Event(poolRef, corev1.EventTypeNormal, reason, n+": "+msg)
	}
	return nil
}

func patchNodeAnnotations(ctx context.Context, client *kube.Client, node string, set map[string]*string) error {
	patch, err := json.Marshal(map[string]any{"metadata": map[string]any{"annotations": set}})
	if err != nil {
		return fmt.Errorf("encode annotations for node %s: %w", node, err)
	}
	if _, err := client.Nodes().Patch(ctx, node, types.MergePatchType, patch, metav1.PatchOptions{}); err != nil {
		return fmt.Errorf("patch annotations of node %s: %w", node, err)
	}
	return nil
}

// markHealthUnknown sets the nodeward health conditions of a node whose
// agent went silent to Unknown, as the node lifecycle controller does for a
// silent kubelet, so stale health never looks fresh.
func markHealthUnknown(ctx context.Context, client *kube.Client, node *corev1.Node, now time.Time) (bool, error) {
	var conds []corev1.NodeCondition
	for _, cond := range node.Status.Conditions {
		if v1alpha1.IsHealthCondition(cond.Type) && cond.Status != corev1.ConditionUnknown {
			conds = append(conds, corev1.NodeCondition{
				Type: cond.Type, Status: corev1.ConditionUnknown, Reason: "AgentSilent",
				Message:            "nodeward agent stopped renewing its liveness Lease",
				LastHeartbeatTime:  metav1.NewTime(now),
				LastTransitionTime: metav1.NewTime(now),
			})
		}
	}
	if len(conds) == 0 {
		return false, nil
	}
	patch, err := json.Marshal(map[string]any{"status": map[string]any{"conditions": conds}})
	if err != nil {
		return false, err
	}
	if _, err := client.PatchNodeStatus(ctx, node.Name, patch); err != nil {
		return false, fmt.Errorf("mark health Unknown on silent node %s: %w", node.Name, err)
	}
	return true, nil
}

// nodeRef references a Node for Events; Node events live in "default"
// as the kubelet's do.
func nodeRef(name string) *corev1.ObjectReference {
	return &corev1.ObjectReference{APIVersion: "v1", Kind: "Node", Name: name, UID: types.UID(name)}
}
