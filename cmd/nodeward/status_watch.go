package main

import (
	"context"
	"fmt"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/fields"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/watch"
	"k8s.io/client-go/dynamic"
	"k8s.io/client-go/tools/cache"

	"github.com/nodeward/nodeward/api/kube"
)

// watchStatus watches Nodes and UpdatePools (plain informers, as the
// coordinator's) and prints the report again whenever what it shows
// changes, until ctx ends; the end of ctx is not an error.
func watchStatus(ctx context.Context, client *kube.Client, poolAPI dynamic.NamespaceableResourceInterface, p statusPrinter) error {
	ctx, cancel := context.WithCancel(ctx)
	defer cancel()
	nodes := cache.NewSharedIndexInformer(
		cache.NewListWatchFromClient(client.CoreREST(), "nodes", metav1.NamespaceAll, fields.Everything()),
		&corev1.Node{}, 0, cache.Indexers{})
	pools := cache.NewSharedIndexInformer(&cache.ListWatch{
		ListWithContextFunc: func(ctx context.Context, o metav1.ListOptions) (runtime.Object, error) {
			return poolAPI.List(ctx, o)
		},
		WatchFuncWithContext: func(ctx context.Context, o metav1.ListOptions) (watch.Interface, error) {
			return poolAPI.Watch(ctx, o)
		},
	}, &unstructured.Unstructured{}, 0, cache.Indexers{})
	changed := make(chan struct{}, 1)
	notify := func() {
		select {
		case changed <- struct{}{}:
		default:
		}
	}
	handler := cache.ResourceEventHandlerFuncs{
		AddFunc:    func(any) { notify() },
		UpdateFunc: func(any, any) { notify() },
		DeleteFunc: func(any) { notify() },
	}
	for _, inf := range []cache.SharedIndexInformer{nodes, pools} {
		if _, err := inf.AddEventHandler(handler); err != nil {
			return fmt.Errorf("watch: %w", err)
		}
		go inf.RunWithContext(ctx)
	}
	synced := make(chan struct{})
	go func() {
		if cache.WaitForCacheSync(ctx.Done(), nodes.HasSynced, pools.HasSynced) {
			close(synced)
		}
	}()
	ready := false
	for {
		select {
		case <-ctx.Done():
			return nil
		case <-synced:
			ready, synced = true, nil
		case <-changed:
		}
		if !ready {
			continue
		}
		var list []corev1.Node
		for _, obj := range nodes.GetStore().List() {
			if n, ok := obj.(*corev1.Node); ok {
				list = append(list, *n)
			}
		}
		if _, err := p.print(pools.GetStore().List(), list); err != nil {
			return err
		}
	}
}
