package chaos

import (
	"context"
	"fmt"
	"net/http"
	"time"

	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/watch"

	v1alpha1 "github.com/nodeward/nodeward/api/v1alpha1"
)

// The watcher's own list-and-watch of Nodes and UpdatePools.

var watchTimeout = int64(300)

// loop lists, then watches from the list's resourceVersion, resuming each
// broken watch where it stopped; when the API server no longer has that
// resourceVersion (410 Gone, after a restart) it lists again: a gap.
func (w *Watcher) loop(ctx context.Context, what string,
	list func(context.Context) ([]runtime.Object, string, error),
	watchFrom func(context.Context, string) (watch.Interface, error),
	replace func(objs []runtime.Object, gap bool),
	event func(watch.EventType, runtime.Object)) {
	first := true
	for ctx.Err() == nil {
		objs, rv, err := list(ctx)
		if err != nil {
			sleep(ctx, 250*time.Millisecond)
			continue
		}
		replace(objs, !first)
		if first {
			w.mu.Lock()
			if w.syncedN++; w.syncedN == 2 {
				close(w.synced)
			}
			w.mu.Unlock()
		} else {
			w.mu.Lock()
			w.stats.Gaps++
			w.mu.Unlock()
			w.opts.Log("watcher: %s relisted at resourceVersion %s (watch gap)", what, rv)
		}
		first = false
		for ctx.Err() == nil {
			wi, err := watchFrom(ctx, rv)
			if err != nil {
				if expired(err) {
					break
				}
				sleep(ctx, 250*time.Millisecond)
				continue
			}
			next, gone := w.drain(wi, rv, event)
			wi.Stop()
			rv = next
			if gone {
				break
			}
		}
	}
}

// drain consumes one watch until it ends; it returns the last
// resourceVersion seen and whether the watch ended on 410 Gone.
func (w *Watcher) drain(wi watch.Interface, rv string, event func(watch.EventType, runtime.Object)) (string, bool) {
	for ev := range wi.ResultChan() {
		switch ev.Type {
		case watch.Error:
			return rv, expired(apierrors.FromObject(ev.Object))
		case watch.Bookmark:
			if m, err := metaOf(ev.Object); err == nil {
				rv = m.GetResourceVersion()
			}
		default:
			if m, err := metaOf(ev.Object); err == nil {
				rv = m.GetResourceVersion()
			}
			event(ev.Type, ev.Object)
		}
	}
	return rv, false
}

func metaOf(obj runtime.Object) (metav1.Object, error) {
	if m, ok := obj.(metav1.Object); ok {
		return m, nil
	}
	return nil, fmt.Errorf("%T has no metadata", obj)
}

func expired(err error) bool {
	if err == nil {
		return false
	}
	if apierrors.IsResourceExpired(err) || apierrors.IsGone(err) {
		return true
	}
	s, ok := err.(apierrors.APIStatus)
	return ok && s.Status().Code == http.StatusGone
}

func sleep(ctx context.Context, d time.Duration) {
	select {
	case <-ctx.Done():
	case <-time.After(d):
	}
}

func (w *Watcher) listNodes(ctx context.Context) ([]runtime.Object, string, error) {
	lctx, cancel := context.WithTimeout(ctx, 20*time.Second)
	defer cancel()
	list, err := w.opts.Client.CoreV1().Nodes().List(lctx, metav1.ListOptions{})
	if err != nil {
		return nil, "", err
	}
	objs := make([]runtime.Object, len(list.Items))
	for i := range list.Items {
		objs[i] = &list.Items[i]
	}
	return objs, list.ResourceVersion, nil
}

func (w *Watcher) watchNodes(ctx context.Context, rv string) (watch.Interface, error) {
	return w.opts.Client.CoreV1().Nodes().Watch(ctx, metav1.ListOptions{ResourceVersion: rv,
		AllowWatchBookmarks: true, TimeoutSeconds: &watchTimeout})
}

func (w *Watcher) listPools(ctx context.Context) ([]runtime.Object, string, error) {
	lctx, cancel := context.WithTimeout(ctx, 20*time.Second)
	defer cancel()
	list, err := w.opts.Dynamic.Resource(v1alpha1.UpdatePoolResource()).List(lctx, metav1.ListOptions{LabelSelector: w.opts.PoolSelector})
	if err != nil {
		return nil, "", err
	}
	objs := make([]runtime.Object, len(list.Items))
	for i := range list.Items {
		objs[i] = &list.Items[i]
	}
	return objs, list.GetResourceVersion(), nil
}

func (w *Watcher) watchPools(ctx context.Context, rv string) (watch.Interface, error) {
	return w.opts.Dynamic.Resource(v1alpha1.UpdatePoolResource()).Watch(ctx, metav1.ListOptions{
		LabelSelector: w.opts.PoolSelector, ResourceVersion: rv, AllowWatchBookmarks: true, TimeoutSeconds: &watchTimeout})
}
