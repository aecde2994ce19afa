package update

import (
	"context"
	"encoding/json"
	"fmt"
	"log/slog"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"

	"github.com/nodeward/nodeward/api/kube"
)

// PatchAnnotations sets (value non-nil) or removes (nil) annotations of a
// node with a JSON merge patch, which touches no other key, and returns the
// node as written.
func PatchAnnotations(ctx context.Context, client *kube.Client, node string, set map[string]*string) (*corev1.Node, error) {
	patch, err := json.Marshal(map[string]any{"metadata": map[string]any{"annotations": set}})
	if err != nil {
		return nil, fmt.Errorf("encode annotation patch: %w", err)
	}
	written, err := client.Nodes().Patch(ctx, node, types.MergePatchType, patch, metav1.PatchOptions{})
	if err != nil {
		return nil, fmt.Errorf("patch annotations of node %s: %w", node, err)
	}
	return written, nil
}

// NodeEvents records Events on the Node object.
type NodeEvents struct {
	recorder *kube.Recorder
}

// NewNodeEvents starts an event recorder writing through client; Stop
// flushes it.
func NewNodeEvents(client *kube.Client, component, host string, log *slog.Logger) *NodeEvents {
	return &NodeEvents{recorder: client.NewRecorder(context.Background(),
		corev1.EventSource{Component: component, Host: host}, kube.RecorderOptions{Log: log})}
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

// Recorder is the recorder behind the sink, for the drain package's Events.
func (e *NodeEvents) Recorder() *kube.Recorder { return e.recorder }

// Stop writes the Events still queued, for at most
// kube.RecorderFlushTimeout, and stops the recorder.
func (e *NodeEvents) Stop() { e.recorder.Shutdown(kube.RecorderFlushTimeout) }
