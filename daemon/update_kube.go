package daemon

import (
	"context"
	"encoding/json"
	"fmt"
	"sync"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/fields"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/tools/cache"
	"k8s.io/client-go/tools/record"

	"github.com/nodeward/nodeward/api/kube"
)

// NodeWatch keeps the latest state of one Node through a watch limited to
// that node by a field selector (no cluster-wide list or watch), and
// signals every change on Wake.
type NodeWatch struct {
	client *kube.Client
	name   string
	wake   chan struct{}

	mu     sync.Mutex
	node   *corev1.Node
	synced bool
}

// NewNodeWatch prepares a watch of node name; Run starts it.
func NewNodeWatch(client *kube.Client, name string) *NodeWatch {
	return &NodeWatch{client: client, name: name, wake: make(chan struct{}, 1)}
}

// Wake is signalled (coalesced) whenever the node changes.
func (w *NodeWatch) Wake() <-chan struct{} { return w.wake }

// Run watches until ctx ends.
func (w *NodeWatch) Run(ctx context.Context) {
	lw := cache.NewListWatchFromClient(w.client.CoreREST(), "nodes", metav1.NamespaceAll,
		fields.OneTermEqualSelector("metadata.name", w.name))
	_, informer := cache.NewInformerWithOptions(cache.InformerOptions{
		ListerWatcher: lw,
		ObjectType:    &corev1.Node{},
		Handler: cache.ResourceEventHandlerFuncs{
			AddFunc:    func(obj any) { w.set(obj) },
			UpdateFunc: func(_, obj any) { w.set(obj) },
			DeleteFunc: func(any) { w.set(nil) },
		},
	})
	informer.RunWithContext(ctx)
}

func (w *NodeWatch) set(obj any) {
	node, _ := obj.(*corev1.Node)
	w.mu.Lock()
	w.node, w.synced = node, true
	w.mu.Unlock()
	select {
	case w.wake <- struct{}{}:
	default:
	}
}

// Node returns the last seen node; before the watch delivered it, or when
// the node is gone, it asks the API server directly.
func (w *NodeWatch) Node(ctx context.Context) (*corev1.Node, error) {
	w.mu.Lock()
	node := w.node
	w.mu.Unlock()
	if node != nil {
		return node.DeepCopy(), nil
	}
	n, err := w.client.Nodes().Get(ctx, w.name, metav1.GetOptions{})
	if err != nil {
		return nil, fmt.Errorf("get node %s: %w", w.name, err)
	}
	return n, nil
}

// patchAnnotations sets (value non-nil) or removes (nil) annotations of a
// node with a JSON merge patch, which touches no other key.
func patchAnnotations(ctx context.Context, client *kube.Client, node string, set map[string]*string) error {
	patch, err := json.Marshal(map[string]any{"metadata": map[string]any{"annotations": set}})
	if err != nil {
		return fmt.Errorf("encode annotation patch: %w", err)
	}
	if _, err := client.Nodes().Patch(ctx, node, types.MergePatchType, patch, metav1.PatchOptions{}); err != nil {
		return fmt.Errorf("patch annotations of node %s: %w", node, err)
	}
	return nil
}

// NodeEvents records Events on the Node object.
type NodeEvents struct {
	recorder    record.EventRecorder
	broadcaster record.EventBroadcaster
}

// NewNodeEvents starts an event broadcaster writing through client; Stop
// flushes it.
func NewNodeEvents(client *kube.Client, component, host string) *NodeEvents {
	b := record.NewBroadcaster()
	b.StartRecordingToSink(client.EventSink(context.Background()))
	return &NodeEvents{
		broadcaster: b,
		recorder:    b.NewRecorder(client.Scheme(), corev1.EventSource{Component: component, Host: host}),
	}
}

// Event implements EventSink.
func (e *NodeEvents) Event(node *corev1.Node, warning bool, reason, message string) {
	kind := corev1.EventTypeNormal
	if warning {
		kind = corev1.EventTypeWarning
	}
	// Node events live in the default namespace and refer to the node by
	// name, as the kubelet's do.
	ref := &corev1.ObjectReference{Kind: "Node", Name: node.Name, UID: types.UID(node.Name), APIVersion: "v1"}
	e.recorder.Event(ref, kind, reason, message)
}

// Stop shuts the broadcaster down.
func (e *NodeEvents) Stop() { e.broadcaster.Shutdown() }
