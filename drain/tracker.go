package drain

import (
	"context"
	"fmt"
	"sync"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/fields"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/watch"
	"k8s.io/client-go/tools/cache"

	"github.com/nodeward/nodeward/api/kube"
)

// podTracker watches the pods bound to one node, so that the drain learns a
// pod is gone from one watch event instead of polling every pod: kubectl
// polls each pod every second, which at 100 pods is 100 requests a second.
type podTracker struct {
	store    cache.Store
	informer cache.Controller

	mu      sync.Mutex
	changed chan struct{} // closed and replaced at every event
}

func newPodTracker(client *kube.Client, node string) *podTracker {
	t := &podTracker{changed: make(chan struct{})}
	selector := fields.OneTermEqualSelector("spec.nodeName", node).String()
	lw := &cache.ListWatch{
		ListWithContextFunc: func(ctx context.Context, o metav1.ListOptions) (runtime.Object, error) {
			o.FieldSelector = selector
			return client.Pods(metav1.NamespaceAll).List(ctx, o)
		},
		WatchFuncWithContext: func(ctx context.Context, o metav1.ListOptions) (watch.Interface, error) {
			o.FieldSelector = selector
			return client.Pods(metav1.NamespaceAll).Watch(ctx, o)
		},
	}
	notify := func(any) { t.notify() }
	t.store, t.informer = cache.NewInformerWithOptions(cache.InformerOptions{
		ListerWatcher: lw,
		ObjectType:    &corev1.Pod{},
		Handler: cache.ResourceEventHandlerFuncs{
			AddFunc:    notify,
			UpdateFunc: func(_, o any) { t.notify() },
			DeleteFunc: notify,
		},
		// Only what the drain reads is kept: a node's pods can be many.
		Transform: func(obj any) (any, error) {
			if p, ok := obj.(*corev1.Pod); ok {
				p.ManagedFields = nil
			}
			return obj, nil
		},
	})
	return t
}

// start runs the watch until ctx ends and waits for the first list.
func (t *podTracker) start(ctx context.Context) error {
	go t.informer.RunWithContext(ctx)
	if !cache.WaitForCacheSync(ctx.Done(), t.informer.HasSynced) {
		return fmt.Errorf("list pods: %w", context.Cause(ctx))
	}
	return nil
}

func (t *podTracker) notify() {
	t.mu.Lock()
	close(t.changed)
	t.changed = make(chan struct{})
	t.mu.Unlock()
}

// wait returns a channel closed at the next change.
func (t *podTracker) wait() <-chan struct{} {
	t.mu.Lock()
	defer t.mu.Unlock()
	return t.changed
}

// pods lists the node's pods as last seen.
func (t *podTracker) pods() []*corev1.Pod {
	objs := t.store.List()
	out := make([]*corev1.Pod, 0, len(objs))
	for _, o := range objs {
		out = append(out, o.(*corev1.Pod))
	}
	return out
}

// get returns the pod ref names while it is still that pod (same UID),
// or nil once it is gone.
func (t *podTracker) get(ref PodRef) *corev1.Pod {
	obj, ok, _ := t.store.GetByKey(ref.Namespace + "/" + ref.Name)
	if !ok {
		return nil
	}
	p := obj.(*corev1.Pod)
	if p.UID != ref.UID {
		return nil
	}
	return p
}
