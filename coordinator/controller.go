package coordinator

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"maps"
	"slices"
	"time"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/client-go/dynamic"
	"k8s.io/client-go/tools/cache"
	"k8s.io/client-go/util/workqueue"

	"github.com/nodeward/nodeward/api/kube"
	"github.com/nodeward/nodeward/api/v1alpha1"
	"github.com/nodeward/nodeward/gate"
	"github.com/nodeward/nodeward/objectgate"
	"github.com/nodeward/nodeward/silence"
)

// Config configures a Controller.
type Config struct {
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
	// ExpectationTimeout bounds how long a grant written but never seen in
	// the node cache counts without asking the API again; then a GET
	// decides (expect.go). Default 30 s.
	ExpectationTimeout time.Duration
	// Gates evaluates pools' health gates; a default evaluator when nil.
	Gates *gate.Evaluator
	// Silences keeps pools' Alertmanager silences; a default keeper when
	// nil.
	Silences *silence.Keeper
	// Progress, when set, receives the state /readyz and /healthz report.
	Progress *Progress
	// SyncWarningInterval is how long the caches may stay unsynced (or
	// the leader Lease unreachable) before a warning naming the API server
	// and the error; warnings repeat with backoff up to 5 minutes apart.
	// kube.DefaultStallInterval when zero.
	SyncWarningInterval time.Duration
	// LeaderTerm is the leadership this controller runs in, written with
	// every grant (v1alpha1.AnnotationGrantTerm) as its fencing token:
	// an agent refuses a grant whose term is not the leader Lease's
	// current one. RunWithLeaderElection sets it; nil (no leader
	// election) writes grants without a term.
	LeaderTerm *v1alpha1.LeaderTerm

	// betweenReads and planned are test hooks (export_test.go): one runs
	// in each planning pass between the copy of the expectations and the
	// listing of the nodes, with the pool the pass plans; the other gets
	// each plan's unavailable nodes.
	betweenReads func(pool *v1alpha1.UpdatePool, now time.Time)
	planned      func(pool string, unavailable map[string]string)
	// nodeEvents, a test hook, wraps the node index's handler of the Node
	// informer's events (to withhold or rewrite some).
	nodeEvents func(cache.ResourceEventHandler) cache.ResourceEventHandler
}

// Controller grants update slots. Run it only while holding leadership.
type Controller struct {
	opts   Config
	stall  *kube.StallWarner
	queue  workqueue.TypedRateLimitingInterface[string]
	nodes  cache.SharedIndexInformer
	leases cache.SharedIndexInformer
	// index is what a pass reads of the nodes, kept from nodes' and
	// leases' events; indexSynced reports both its handlers have seen the
	// first list.
	index       *nodeIndex
	indexSynced []cache.InformerSynced
	pools       cache.SharedIndexInformer
	// objectGates reads the objects the pools' object gates name, each
	// resource through a watch started when a pool first needs it.
	objectGates *objectgate.Evaluator
	// expectations are the grants written but not yet in the index.
	expectations *expectations
	// departures count the nodes deleted mid-update.
	departures *departures
	// backoff holds back the nodes whose writes fail.
	backoff *writeBackoff
	// guardrails remember the pools' gate verdicts and silence syncs.
	guardrails *guardrailMemory
	// statusPace spaces each pool's status writes.
	statusPace *statusPace
	grantNames grantNames
	events     *kube.Recorder
	// guardGrownAt is when a rate-limited zone last gained a permit.
	guardGrownAt time.Time
	stopEvents   func()
	// views keeps the pools' node views between passes.
	views *viewCache
	// machines are the Machines beneath the nodes, where a Machine API is
	// served (machines.go).
	machines *machineIndex
	// healthChecks are the MachineHealthChecks above them, where served
	// (healthchecks.go).
	healthChecks *healthCheckIndex
	// machinesSwept is when the Machines' pre-drain hooks and remediation
	// holds were last swept.
	machinesSwept time.Time
}

// New builds a controller; Run starts it.
func New(opts Config) *Controller {
	opts = opts.withDefaults()
	// Plain informers rather than client-go's informer factory, whose
	// ForResource links the informers and listers of every API group.
	stall := &kube.StallWarner{Log: opts.Log, Server: opts.Client.Host(), What: "coordinator caches",
		Interval: opts.SyncWarningInterval}
	c := &Controller{
		opts:         opts,
		stall:        stall,
		queue:        workqueue.NewTypedRateLimitingQueue(workqueue.DefaultTypedControllerRateLimiter[string]()),
		nodes:        nodeInformer(opts, stall),
		leases:       leaseInformer(opts, stall),
		pools:        poolInformer(opts, stall),
		index:        newNodeIndex(),
		departures:   newDepartures(),
		backoff:      newWriteBackoff(),
		guardrails:   newGuardrailMemory(),
		statusPace:   newStatusPace(),
		views:        newViewCache(),
		machines:     newMachineIndex(),
		healthChecks: newHealthCheckIndex(),
	}
	c.objectGates = &objectgate.Evaluator{Programs: objectgate.NewPrograms(),
		Watches: objectgate.NewWatches(opts.Dynamic, opts.Log, c.enqueuePoolsWatching)}
	c.expectations = newExpectations(opts.Client, opts.Log, c.index.node, func(node string, exp expectation) {
		c.departures.expected(node, exp, c.opts.Now())
	}, opts.ExpectationTimeout)
	c.events = opts.Client.NewRecorder(context.Background(), corev1.EventSource{Component: "nodeward-coordinator"},
		kube.RecorderOptions{Log: opts.Log})
	c.stopEvents = func() { c.events.Shutdown(kube.RecorderFlushTimeout) }
	c.addHandlers()
	return c
}

// withDefaults fills the zero fields of a Config.
func (opts Config) withDefaults() Config {
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
	if opts.ExpectationTimeout == 0 {
		opts.ExpectationTimeout = 30 * time.Second
	}
	if opts.Gates == nil {
		opts.Gates = gate.NewEvaluator(nil)
	}
	if opts.Silences == nil {
		opts.Silences = silence.NewKeeper(nil, opts.Now)
	}
	return opts
}

// Run syncs the caches from a fresh list (so a new leader sees every grant
// its predecessor wrote), then reconciles until ctx ends.
func (c *Controller) Run(ctx context.Context) error {
	progress := c.opts.Progress
	progress.runStarted(c.opts.Resync)
	defer progress.runStopped()
	defer c.queue.ShutDown()
	defer c.stopEvents()
	defer c.opts.Metrics.stopped()
	go c.nodes.RunWithContext(ctx)
	go c.leases.RunWithContext(ctx)
	go c.pools.RunWithContext(ctx)
	c.objectGates.Watches.Start(ctx)
	machines := &machineWatch{c: c, index: c.machines, healthChecks: c.healthChecks}
	if err := machines.start(ctx); err != nil {
		return err
	}
	synced := append([]cache.InformerSynced{c.nodes.HasSynced, c.leases.HasSynced, c.pools.HasSynced}, c.indexSynced...)
	synced = append(synced, machines.synced...)
	if !c.stall.WaitForSync(ctx, synced, func() []any {
		return []any{"nodes", len(c.nodes.GetStore().ListKeys()), "pools", len(c.pools.GetStore().ListKeys())}
	}) {
		return fmt.Errorf("sync caches: %w", ctx.Err())
	}
	progress.cachesSynced()
	go c.resyncLoop(ctx)
	c.enqueuePools()
	go func() { <-ctx.Done(); c.queue.ShutDown() }()
	for c.processNext(ctx) {
	}
	return nil
}

// resyncLoop re-plans every pool and publishes the guard every Resync.
func (c *Controller) resyncLoop(ctx context.Context) {
	t := time.NewTicker(c.opts.Resync)
	defer t.Stop()
	for {
		select {
		case <-ctx.Done():
			return
		case <-t.C:
		}
		c.opts.Progress.tick()
		// Also here: a pass still planning a pool's old spec may have
		// started a watch its new spec no longer names.
		c.retainObjectWatches()
		c.enqueuePools()
		if !c.opts.DisableGuard {
			gctx, cancel := context.WithTimeout(ctx, reconcileTimeout)
			if err := c.publishNoExecuteGuard(gctx, c.opts.Now()); err != nil {
				c.opts.Log.Error("publish disruption guard", "err", err)
			}
			cancel()
		}
	}
}

func (c *Controller) processNext(ctx context.Context) bool {
	key, quit := c.queue.Get()
	if quit {
		return false
	}
	defer c.queue.Done(key)
	c.opts.Progress.busy(true)
	defer c.opts.Progress.busy(false)
	rctx, cancel := context.WithTimeout(ctx, reconcileTimeout)
	defer cancel()
	err := c.reconcile(rctx, key)
	c.sweepMachines(rctx, c.opts.Now())
	if err != nil {
		level := slog.LevelError
		if onlyStale(err) {
			level = slog.LevelDebug // the node's event re-plans the pool
		}
		c.opts.Log.Log(ctx, level, "reconcile pool", "pool", key, "err", err)
		c.queue.AddRateLimited(key)
		return true
	}
	c.queue.Forget(key)
	return true
}

// onlyStale reports whether err consists of errStale errors only.
func onlyStale(err error) bool {
	if j, ok := err.(interface{ Unwrap() []error }); ok {
		for _, e := range j.Unwrap() {
			if !onlyStale(e) {
				return false
			}
		}
		return true
	}
	return errors.Is(err, errStale) || errors.Is(err, errPoolChanged)
}

func (c *Controller) reconcile(ctx context.Context, key string) error {
	pool, err := c.pool(key)
	if err != nil {
		return err
	}
	if pool == nil {
		c.opts.Metrics.forget(key) // UpdatePools are cluster-scoped: the key is the name
		c.views.forget(key)
		return nil
	}
	now := c.opts.Now()
	c.expectations.expire(ctx, now)
	in, silent, plan, err := c.plan(ctx, pool, now)
	if err != nil {
		return err
	}
	names, set, err := c.passBookkeeping(pool, in, plan, now)
	if err != nil {
		return err
	}
	if writesSlots(plan) || set != nil {
		fresh, changed, err := c.confirmPool(ctx, pool)
		if err != nil || fresh == nil {
			return err
		}
		if changed {
			pool = fresh
			if in, silent, plan, err = c.plan(ctx, pool, now); err != nil {
				return err
			}
			if names, set, err = c.passBookkeeping(pool, in, plan, now); err != nil {
				return err
			}
		}
		if set != nil {
			// Before any grant: a restart or a new leader must go on
			// counting a node deleted mid-update, and find this pass's
			// grants recorded.
			set.ResourceVersion = fresh.ResourceVersion
			if err := c.writeBookkeeping(ctx, set); err != nil {
				return err
			}
		}
	}
	if plan.gateHalt != "" {
		// Persisted before anything is released; the pool's update
		// event plans it again, halted.
		return c.persistHalt(ctx, pool, plan.gateHalt)
	}
	c.syncSilences(ctx, pool, plan, now)
	errs := c.markSilent(ctx, silent, now)
	errs = append(errs, c.apply(ctx, pool, plan, in, names))
	c.opts.Metrics.observe(pool.Name, plan)
	if pool.Spec.Gates == nil {
		c.opts.Metrics.gatesPassing.DeleteLabelValues(pool.Name) // gates removed from the spec
	}
	if d := c.backoff.nextRetry(now); d > 0 {
		c.queue.AddAfter(key, d)
	}
	if !plan.soakEnds.IsZero() {
		c.queue.AddAfter(key, max(plan.soakEnds.Sub(now), time.Millisecond))
	}
	errs = append(errs, c.maybeWriteStatus(ctx, key, pool, plan, now))
	return errors.Join(errs...)
}

// plan plans pool, and when the plan needs the gates' verdict (it would
// grant or end a soak) or the last verdict is older than Resync (the
// status shows the gates while the pool waits), evaluates them and plans
// again with the verdict. The evaluation is slow (a Prometheus query): the
// plan with the verdict reads its input afresh, as planPass does, so that a
// node relabelled into the pool or a grant that appeared meanwhile counts.
func (c *Controller) plan(ctx context.Context, pool *v1alpha1.UpdatePool, now time.Time) (planInput, []*corev1.Node, *poolPlan, error) {
	in, silent, plan, err := c.planPass(pool, now, nil)
	if err != nil || pool.Spec.Gates == nil {
		return in, silent, plan, err
	}
	if !wantsVerdict(plan, c.guardrails.of(pool.Name).evaluated, now, c.opts.Resync) {
		return in, silent, plan, nil
	}
	v := c.evaluateGates(ctx, pool, now)
	return c.planPass(pool, now, &v)
}

// wantsVerdict reports whether a plan made without the gates' verdict is
// to be made again with one: it would grant or end a soak (needGates), or
// the last verdict (evaluated) is older than resync while nodes wait or
// soak (the status shows the gates, and a gate failing during a soak
// halts the pool).
func wantsVerdict(plan *poolPlan, evaluated, now time.Time, resync time.Duration) bool {
	stale := now.Sub(evaluated) >= resync
	return plan.needGates || (stale && (plan.queued > 0 || len(plan.soaking) > 0))
}

// planPass plans pool from the caches: the expectations FIRST, then the
// nodes, so that a node event in between leaves a new grant in the copy or
// in the list, never in neither. It also returns the nodes whose agents
// went silent.
func (c *Controller) planPass(pool *v1alpha1.UpdatePool, now time.Time, gates *gateVerdict) (planInput, []*corev1.Node, *poolPlan, error) {
	start := time.Now() // a duration for the metric, not a decision: the real clock
	defer func() { c.opts.Metrics.planSeconds.WithLabelValues(pool.Name).Observe(time.Since(start).Seconds()) }()
	pending := c.expectations.nodes()
	if c.opts.betweenReads != nil {
		c.opts.betweenReads(pool, now)
	}
	in, silent, err := c.input(pool, pending, now)
	if err != nil {
		return in, nil, nil, err
	}
	in.gates = gates
	plan, err := planPool(in)
	if err != nil {
		return in, nil, nil, fmt.Errorf("plan pool %s: %w", pool.Name, err)
	}
	if c.opts.planned != nil {
		c.opts.planned(pool.Name, plan.unavailable)
	}
	return in, silent, plan, nil
}

// writesSlots reports whether plan grants, releases or starts a soak: what
// must never be written under a pool the cache has stale.
func writesSlots(plan *poolPlan) bool {
	return len(plan.grant)+len(plan.release)+len(plan.startSoak) > 0
}

// confirmPool reads pool from the API server before a plan that grants,
// releases or starts a soak is written, and reports whether what a plan
// reads of it changed since the cache read: after an API server restart the
// pool watch can lag for seconds, and a lowered maxUnavailable or a pause
// not yet delivered must not be granted past; nor may a halt this
// controller wrote in its last pass (persistHalt), which the cache may not
// show yet, be lost to a gate passing again (its soaking nodes released as
// over, the next granted). It returns nil when the pool is gone.
func (c *Controller) confirmPool(ctx context.Context, pool *v1alpha1.UpdatePool) (*v1alpha1.UpdatePool, bool, error) {
	fresh, err := c.freshPool(ctx, pool.Name)
	if err != nil || fresh == nil {
		return nil, false, err
	}
	if !poolChanged(pool, fresh) {
		return fresh, false, nil
	}
	c.opts.Log.Info("pool changed since the cache read; planning again with the API server's copy",
		"pool", pool.Name, "cachedGeneration", pool.Generation, "generation", fresh.Generation,
		"halted", fresh.Annotations[v1alpha1.AnnotationHalted])
	return fresh, true, nil
}

// poolChanged reports whether what a plan reads of a pool differs between
// the cached copy and the API server's (fresh): its spec (the generation
// moves with the spec only, not with the status this controller writes
// every second), its UID (deleted and created again), its deletion, its
// annotations (the halt, the acknowledged failures, the departed nodes,
// the grant records) or its finalizers (the bookkeeping writes the whole
// list).
func poolChanged(cached, fresh *v1alpha1.UpdatePool) bool {
	return fresh.Generation != cached.Generation || fresh.UID != cached.UID ||
		(fresh.DeletionTimestamp == nil) != (cached.DeletionTimestamp == nil) ||
		!maps.Equal(fresh.Annotations, cached.Annotations) || !slices.Equal(fresh.Finalizers, cached.Finalizers)
}

// freshPool reads pool from the API server (a quorum read), or nil when
// it is gone.
func (c *Controller) freshPool(ctx context.Context, name string) (*v1alpha1.UpdatePool, error) {
	obj, err := c.opts.Dynamic.Resource(v1alpha1.UpdatePoolResource()).Get(ctx, name, metav1.GetOptions{})
	if apierrors.IsNotFound(err) {
		return nil, nil
	}
	if err != nil {
		return nil, fmt.Errorf("read pool %s before writing grants or releases: %w", name, err)
	}
	var pool v1alpha1.UpdatePool
	if err := runtime.DefaultUnstructuredConverter.FromUnstructured(obj.Object, &pool); err != nil {
		return nil, fmt.Errorf("decode UpdatePool %s: %w", name, err)
	}
	return &pool, nil
}

// maybeWriteStatus writes the pool's status at most once per
// statusInterval: it changes with every grant, and writing it on the path
// from a freed slot to the next grant would delay the grant. A later
// reconcile (queued here) writes what is pending.
func (c *Controller) maybeWriteStatus(ctx context.Context, key string, pool *v1alpha1.UpdatePool, plan *poolPlan, now time.Time) error {
	if wait := c.statusPace.wait(key, now); wait > 0 {
		c.queue.AddAfter(key, wait)
		return nil
	}
	written, err := c.writeStatus(ctx, pool, plan)
	if written {
		c.statusPace.wrote(key, now)
	}
	return err
}

// passBookkeeping is passWrites with the controller's index and grant
// names.
func (c *Controller) passBookkeeping(pool *v1alpha1.UpdatePool, in planInput, plan *poolPlan, now time.Time) (map[string]string, *Write, error) {
	return passWrites(pool, in, plan, c.index.node, func(p *v1alpha1.UpdatePool, _, avoid string) string {
		return c.grantNames.next(p, now, avoid)
	})
}
