package daemon

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"strconv"
	"sync"
	"sync/atomic"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/fields"
	"k8s.io/client-go/rest"
	"k8s.io/client-go/tools/cache"

	"github.com/nodeward/nodeward/api/kube"
	"github.com/nodeward/nodeward/conditions"
)

// HealthConfig wires the health half of the agent.
type HealthConfig struct {
	// RestConfig reaches the API server; requests are counted in
	// nodeward_api_requests_total.
	RestConfig *rest.Config
	NodeName   string
	Config     conditions.Config
	// Registry receives the health metrics and is served on /metrics; a
	// fresh one when nil.
	Registry *prometheus.Registry
	// Guard allows NoExecute taints; nil refuses them all.
	Guard conditions.DisruptionGuard
	// NetworkOptions adjust the network probe (tests watch a namespace).
	NetworkOptions []conditions.NetworkOption
	Log            *slog.Logger
}

// Health runs the probes and keeps the node's nodeward conditions, taints
// and liveness Lease current. It watches only its own Node object.
type Health struct {
	cfg       HealthConfig
	client    *kube.Client
	metrics   *conditions.Metrics
	probes    []conditions.Probe
	monitor   *conditions.Monitor
	publisher *conditions.Publisher
	lease     *LeaseRenewer
	log       *slog.Logger

	mu       sync.Mutex
	node     *corev1.Node // the freshest copy seen, from the watch or a write
	kick     chan struct{}
	synced   atomic.Bool
	settled  atomic.Bool // conditions and taints written at least once
	lastErr  atomic.Pointer[string]
	lastBeat time.Time
}

// NewHealth validates cfg and builds the component; Run starts it.
func NewHealth(cfg HealthConfig) (*Health, error) {
	if cfg.NodeName == "" {
		return nil, errors.New("node name is empty: set --node-name or NODE_NAME")
	}
	if err := cfg.Config.Validate(); err != nil {
		return nil, err
	}
	if cfg.Registry == nil {
		cfg.Registry = prometheus.NewRegistry()
	}
	if cfg.Log == nil {
		cfg.Log = slog.Default()
	}
	metrics := conditions.NewMetrics(cfg.Registry)
	rc := rest.CopyConfig(cfg.RestConfig)
	rc.Wrap(countRequests(metrics))
	client, err := kube.NewForConfig(rc)
	if err != nil {
		return nil, fmt.Errorf("create Kubernetes client: %w", err)
	}
	probes := conditions.Probes(cfg.Config, metrics, cfg.NetworkOptions...)
	h := &Health{
		cfg: cfg, client: client, metrics: metrics, probes: probes, log: cfg.Log,
		monitor: conditions.NewMonitor(probes, cfg.Config.Hysteresis, metrics, cfg.Log),
		publisher: conditions.NewPublisher(client, cfg.NodeName, conditions.NewTaintTable(cfg.Config.Taints),
			cfg.Guard, metrics, cfg.Log),
		kick: make(chan struct{}, 1),
	}
	h.lease = NewLeaseRenewer(client, cfg.NodeName, cfg.Config.LeaseRenewInterval.Duration, h.nodeUID, cfg.Log)
	return h, nil
}

// Registry holds the health metrics.
func (h *Health) Registry() *prometheus.Registry { return h.cfg.Registry }

// Conditions returns the current damped conditions.
func (h *Health) Conditions() []conditions.Condition { return h.monitor.Conditions() }

// Ready reports whether every probe has run, the Node is watched and the
// conditions were published; the reason says what is missing.
func (h *Health) Ready() (bool, string) {
	switch {
	case !h.monitor.Ready():
		return false, "probes have not all run yet"
	case !h.synced.Load():
		return false, "node watch not synced"
	case !h.settled.Load():
		if e := h.lastErr.Load(); e != nil {
			return false, "conditions not yet published: " + *e
		}
		return false, "conditions not yet published"
	}
	return true, "ok"
}

// Run works until ctx ends.
func (h *Health) Run(ctx context.Context) error {
	defer conditions.Close(h.probes)
	var wg sync.WaitGroup
	defer wg.Wait()
	ctx, cancel := context.WithCancel(ctx)
	defer cancel()

	// A plain informer rather than client-go's informer factory: the
	// factory's ForResource links the informers and listers of every API
	// group into the binary (see docs/benchmarks.md, agent RSS).
	informer := cache.NewSharedIndexInformer(
		cache.NewFilteredListWatchFromClient(h.client.CoreREST(), "nodes", metav1.NamespaceAll,
			func(o *metav1.ListOptions) {
				o.FieldSelector = fields.OneTermEqualSelector("metadata.name", h.cfg.NodeName).String()
			}),
		&corev1.Node{}, 0, cache.Indexers{})
	if _, err := informer.AddEventHandler(cache.ResourceEventHandlerFuncs{
		AddFunc:    func(obj any) { h.observeNode(obj) },
		UpdateFunc: func(_, obj any) { h.observeNode(obj) },
	}); err != nil {
		return fmt.Errorf("watch node %s: %w", h.cfg.NodeName, err)
	}
	// Stopped by cancel and waited for by wg.Wait, both deferred above.
	wg.Go(func() { informer.RunWithContext(ctx) })

	wg.Go(func() { h.monitor.Run(ctx) })
	if h.cfg.Config.MetricsAddress != "" {
		srv, err := h.listen(h.cfg.Config.MetricsAddress)
		if err != nil {
			return err
		}
		wg.Go(func() { srv.serve(ctx) })
	}
	if dir := h.cfg.Config.TextfileDirectory; dir != "" {
		wg.Go(func() { h.writeTextfiles(ctx, dir) })
	}
	if !cache.WaitForCacheSync(ctx.Done(), informer.HasSynced) {
		return ctx.Err()
	}
	h.synced.Store(true)
	// After the sync, so that the Lease is created owned by the Node.
	wg.Go(func() { h.lease.Run(ctx) })
	h.publishLoop(ctx)
	return nil
}

func (h *Health) nodeUID() (string, string) {
	h.mu.Lock()
	defer h.mu.Unlock()
	if h.node == nil {
		return "", ""
	}
	return h.node.Name, string(h.node.UID)
}

// observeNode keeps the freshest Node. A watch event can arrive after the
// response of a newer write of ours; comparing resourceVersions as numbers
// (etcd revisions) only serves to skip a redundant write, never for
// correctness: taint writes carry a precondition.
func (h *Health) observeNode(obj any) {
	node, ok := obj.(*corev1.Node)
	if !ok {
		return
	}
	h.setNode(node)
	select {
	case h.kick <- struct{}{}:
	default:
	}
}

func (h *Health) setNode(node *corev1.Node) {
	if node == nil {
		return
	}
	h.mu.Lock()
	defer h.mu.Unlock()
	if h.node != nil && h.node.UID == node.UID && newerVersion(h.node.ResourceVersion, node.ResourceVersion) {
		return
	}
	h.node = node
}

func newerVersion(have, got string) bool {
	a, err1 := strconv.ParseUint(have, 10, 64)
	b, err2 := strconv.ParseUint(got, 10, 64)
	return err1 == nil && err2 == nil && a > b
}

func (h *Health) currentNode() *corev1.Node {
	h.mu.Lock()
	defer h.mu.Unlock()
	return h.node
}
