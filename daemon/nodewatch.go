package daemon

import (
	"context"
	"fmt"
	"log/slog"
	"strconv"
	"sync"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/fields"
	"k8s.io/client-go/tools/cache"

	"github.com/nodeward/nodeward/api/kube"
)

// NodeWatch is the agent's one watch of its own Node, limited to that node
// by a field selector (no cluster-wide list or watch). It keeps the
// freshest copy — from the watch or from a write's response — and fans every
// change out to the agent's parts.
type NodeWatch struct {
	client *kube.Client
	name   string
	synced chan struct{}
	stall  *kube.StallWarner

	mu   sync.Mutex
	node *corev1.Node
	subs []chan struct{}
}

// NewNodeWatch prepares a watch of node name; Run starts it. stall, when
// not nil, warns while the watch has not synced.
func NewNodeWatch(client *kube.Client, name string, stall *kube.StallWarner) *NodeWatch {
	if stall == nil {
		stall = &kube.StallWarner{Log: slog.New(slog.DiscardHandler)}
	}
	return &NodeWatch{client: client, name: name, synced: make(chan struct{}), stall: stall}
}

// Subscribe returns a channel signalled (coalesced) whenever the Node
// changes. Call it before Run.
func (w *NodeWatch) Subscribe() <-chan struct{} {
	w.mu.Lock()
	defer w.mu.Unlock()
	ch := make(chan struct{}, 1)
	w.subs = append(w.subs, ch)
	return ch
}

// Synced is closed once the watch delivered its first list.
func (w *NodeWatch) Synced() <-chan struct{} { return w.synced }

// Run watches until ctx ends. A plain informer rather than client-go's
// informer factory: the factory's ForResource links the informers and
// listers of every API group into the binary (docs/benchmarks.md, RSS).
func (w *NodeWatch) Run(ctx context.Context) {
	lw := cache.NewListWatchFromClient(w.client.CoreREST(), "nodes", metav1.NamespaceAll,
		fields.OneTermEqualSelector("metadata.name", w.name))
	_, informer := cache.NewInformerWithOptions(cache.InformerOptions{
		ListerWatcher: w.stall.ListerWatcher(lw),
		ObjectType:    &corev1.Node{},
		Handler: cache.ResourceEventHandlerFuncs{
			AddFunc:    func(obj any) { w.delivered(obj, false) },
			UpdateFunc: func(_, obj any) { w.delivered(obj, false) },
			DeleteFunc: func(any) { w.delivered(nil, true) },
		},
	})
	go func() {
		if w.stall.WaitForSync(ctx, []cache.InformerSynced{informer.HasSynced}, nil) {
			close(w.synced)
			w.notify() // parts waiting on the sync look again
		}
	}()
	informer.RunWithContext(ctx)
}

func (w *NodeWatch) delivered(obj any, deleted bool) {
	node, _ := obj.(*corev1.Node)
	w.mu.Lock()
	switch {
	case deleted:
		w.node = nil
	case node != nil:
		w.keep(node)
	}
	w.mu.Unlock()
	w.notify()
}

// keep stores node unless the copy held is newer. A watch event can arrive
// after the response of a newer write of ours; comparing resourceVersions
// as numbers (etcd revisions) only serves to skip a redundant write, never
// for correctness: every write that depends on the Node's state carries a
// precondition or is a merge of keys only nodeward writes.
func (w *NodeWatch) keep(node *corev1.Node) {
	if w.node != nil && w.node.UID == node.UID && newerVersion(w.node.ResourceVersion, node.ResourceVersion) {
		return
	}
	w.node = node
}

func (w *NodeWatch) notify() {
	w.mu.Lock()
	defer w.mu.Unlock()
	for _, ch := range w.subs {
		select {
		case ch <- struct{}{}:
		default:
		}
	}
}

// Latest returns the freshest copy, nil before the Node was seen or after
// it was deleted. Callers must not modify it.
func (w *NodeWatch) Latest() *corev1.Node {
	w.mu.Lock()
	defer w.mu.Unlock()
	return w.node
}

// Observe offers the copy a write returned.
func (w *NodeWatch) Observe(node *corev1.Node) {
	if node == nil {
		return
	}
	w.mu.Lock()
	w.keep(node)
	w.mu.Unlock()
}

// Node returns a copy of the freshest Node; before the watch delivered it,
// or when the Node is gone, it asks the API server directly.
func (w *NodeWatch) Node(ctx context.Context) (*corev1.Node, error) {
	if node := w.Latest(); node != nil {
		return node.DeepCopy(), nil
	}
	n, err := w.client.Nodes().Get(ctx, w.name, metav1.GetOptions{})
	if err != nil {
		return nil, fmt.Errorf("get node %s: %w", w.name, err)
	}
	return n, nil
}

// FreshNode reads the Node from the API server, not the watch, and offers
// the copy to the watch (update.FreshNodeSource): a decision that must see
// the coordinator's latest write (the drain policy on a drain timeout)
// does not act on the watch's lag.
func (w *NodeWatch) FreshNode(ctx context.Context) (*corev1.Node, error) {
	n, err := w.client.Nodes().Get(ctx, w.name, metav1.GetOptions{})
	if err != nil {
		return nil, fmt.Errorf("get node %s: %w", w.name, err)
	}
	w.Observe(n)
	return n.DeepCopy(), nil
}

func newerVersion(have, got string) bool {
	a, err1 := strconv.ParseUint(have, 10, 64)
	b, err2 := strconv.ParseUint(got, 10, 64)
	return err1 == nil && err2 == nil && a > b
}
