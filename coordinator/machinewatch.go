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
	c            *Controller
	index        *machineIndex
	healthChecks *healthCheckIndex
	// synced are the started informers' HasSynced.
	synced []cache.InformerSynced
}

// start finds the served APIs (retrying other errors until ctx ends) and
// starts an informer on the Machines of each, and on its health checks
// where it has them; the caller waits for synced.
func (w *machineWatch) start(ctx context.Context) error {
	for _, api := range machineAPIs {
		gvr, served, err := w.find(ctx, api.versions)
		if err != nil {
			return err
		}
		if !served {
			continue
		}
		w.index.serve(api.name, gvr)
		w.run(ctx, gvr, w.handler(api))
		w.c.opts.Log.Info("reading Machines", "api", gvr.GroupVersion().String())
		if gvr, served, err = w.find(ctx, api.healthChecks); err != nil {
			return err
		} else if served {
			w.healthChecks.serve(api.name, gvr)
			w.run(ctx, gvr, w.healthCheckHandler(api))
		}
	}
	return nil
}

// run starts an informer on gvr with handler; synced waits for both.
func (w *machineWatch) run(ctx context.Context, gvr schema.GroupVersionResource, handler cache.ResourceEventHandler) {
	informer := w.informer(gvr)
	reg, _ := informer.AddEventHandler(handler)
	w.synced = append(w.synced, informer.HasSynced, reg.HasSynced)
	go informer.RunWithContext(ctx)
}

// find returns the first of versions that is served.
func (w *machineWatch) find(ctx context.Context, versions []schema.GroupVersionResource) (schema.GroupVersionResource, bool, error) {
	for _, gvr := range versions {
		for delay := 100 * time.Millisecond; ; delay = min(2*delay, 5*time.Second) {
			_, err := w.c.opts.Dynamic.Resource(gvr).List(ctx, metav1.ListOptions{Limit: 1})
			if err == nil {
				return gvr, true, nil
			}
			if apierrors.IsNotFound(err) {
				break
			}
			w.c.opts.Log.Warn("cannot tell whether a Machine API resource is served; asking again", "resource", gvr.String(), "err", err)
			select {
			case <-ctx.Done():
				return gvr, false, fmt.Errorf("find the Machine API resource %s: %w", gvr, ctx.Err())
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

// healthCheckHandler keeps the health check index. Plans do not read it.
func (w *machineWatch) healthCheckHandler(api machineAPI) cache.ResourceEventHandler {
	return indexHandler(func(m *unstructured.Unstructured) { w.healthChecks.set(healthCheckOf(api.name, m)) },
		func(m *unstructured.Unstructured) { w.healthChecks.remove(healthCheckOf(api.name, m).key) },
		func(_, _ *unstructured.Unstructured) {})
}
