package coordinator

import (
	"context"
	"fmt"
	"time"

	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/apimachinery/pkg/watch"
	"k8s.io/client-go/tools/cache"
)

// machineWatch finds the served Machine APIs and keeps the machine index
// from informers on them. An API is found by listing one of its Machines:
// a resource not served answers NotFound, which costs one request at start
// (the discovery client would link the OpenAPI models the agent's binary
// is kept free of). Any other answer is retried: until every API is known
// served or not, the caches do not count as synced, and no pass plans
// without the Machines it should have read.
type machineWatch struct {
	c     *Controller
	index *machineIndex
	// synced are the started informers' HasSynced.
	synced []cache.InformerSynced
}

// start finds the served APIs (retrying other errors until ctx ends) and
// starts an informer on each; the caller waits for synced.
func (w *machineWatch) start(ctx context.Context) error {
	for _, api := range machineAPIs {
		gvr, served, err := w.find(ctx, api)
		if err != nil {
			return err
		}
		if !served {
			continue
		}
		w.index.serve(api.name, gvr)
		informer := w.informer(gvr)
		reg, _ := informer.AddEventHandler(w.handler(api))
		w.synced = append(w.synced, informer.HasSynced, reg.HasSynced)
		go informer.RunWithContext(ctx)
		w.c.opts.Log.Info("reading Machines", "api", gvr.GroupVersion().String())
	}
	return nil
}

// find returns the first of api's versions that is served.
func (w *machineWatch) find(ctx context.Context, api machineAPI) (schema.GroupVersionResource, bool, error) {
	for _, gvr := range api.versions {
		for delay := 100 * time.Millisecond; ; delay = min(2*delay, 5*time.Second) {
			_, err := w.c.opts.Dynamic.Resource(gvr).List(ctx, metav1.ListOptions{Limit: 1})
			if err == nil {
				return gvr, true, nil
			}
			if apierrors.IsNotFound(err) {
				break
			}
			w.c.opts.Log.Warn("cannot tell whether Machines are served; asking again", "api", gvr.GroupVersion().String(), "err", err)
			select {
			case <-ctx.Done():
				return gvr, false, fmt.Errorf("find the Machine API %s: %w", gvr.GroupVersion(), ctx.Err())
			case <-time.After(delay):
			}
		}
	}
	return schema.GroupVersionResource{}, false, nil
}

// informer is a plain informer of gvr's Machines in every namespace.
func (w *machineWatch) informer(gvr schema.GroupVersionResource) cache.SharedIndexInformer {
	api := w.c.opts.Dynamic.Resource(gvr)
	return cache.NewSharedIndexInformer(w.c.stall.ListerWatcher(&cache.ListWatch{
		ListWithContextFunc: func(ctx context.Context, o metav1.ListOptions) (runtime.Object, error) {
			return api.List(ctx, o)
		},
		WatchFuncWithContext: func(ctx context.Context, o metav1.ListOptions) (watch.Interface, error) {
			return api.Watch(ctx, o)
		},
	}), &unstructured.Unstructured{}, 0, cache.Indexers{})
}

// handler keeps the index and re-plans every pool when what a plan reads
// of the Machines changed.
func (w *machineWatch) handler(api machineAPI) cache.ResourceEventHandler {
	changed := func(yes bool) {
		if yes {
			w.c.enqueuePools()
		}
	}
	return indexHandler(func(m *unstructured.Unstructured) { changed(w.index.set(recordOf(api, m))) },
		func(m *unstructured.Unstructured) { changed(w.index.remove(recordOf(api, m).key)) },
		func(_, _ *unstructured.Unstructured) {})
}
