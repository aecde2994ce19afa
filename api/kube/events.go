package kube

import (
	"context"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/tools/record"
)

// eventSink writes the events of a record.EventBroadcaster, each in its
// own namespace, as client-go's EventSinkImpl does.
type eventSink struct {
	ctx    context.Context
	client *Client
}

// EventSink is a record.EventSink on this client. ctx bounds every write;
// the sink's interface has no context of its own.
func (c *Client) EventSink(ctx context.Context) record.EventSink {
	return &eventSink{ctx: ctx, client: c}
}

func (s *eventSink) Create(e *corev1.Event) (*corev1.Event, error) {
	return s.client.Events(e.Namespace).Create(s.ctx, e, metav1.CreateOptions{})
}

func (s *eventSink) Update(e *corev1.Event) (*corev1.Event, error) {
	return s.client.Events(e.Namespace).Update(s.ctx, e, metav1.UpdateOptions{})
}

func (s *eventSink) Patch(e *corev1.Event, data []byte) (*corev1.Event, error) {
	return s.client.Events(e.Namespace).Patch(s.ctx, e.Name, types.StrategicMergePatchType, data, metav1.PatchOptions{})
}
