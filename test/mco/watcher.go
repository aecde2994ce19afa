package mco

import (
	"context"
	"slices"
	"sync"
	"testing"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/labels"
	"k8s.io/client-go/informers"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/tools/cache"
)

// Watcher watches the nodes of a pool and records the most that were
// Unavailable (the node controller's definition) at the same time: the
// invariant a rollout must keep is max <= maxUnavailable. It evaluates the
// informer's whole store after every node event, so a moment when two
// nodes overlap is seen even if it lasts one write.
type Watcher struct {
	t     testing.TB
	store cache.Store

	mu    sync.Mutex
	bound int // 0: none
	max   int
	peak  []string // the unavailable nodes when max was first reached
	now   []string
}

// WatchPool starts a Watcher on the nodes carrying pool's node labels; it
// stops with the test and is synced when WatchPool returns.
func WatchPool(t testing.TB, kube kubernetes.Interface, pool Pool) *Watcher {
	t.Helper()
	selector := labels.SelectorFromSet(pool.NodeLabels()).String()
	factory := informers.NewSharedInformerFactoryWithOptions(kube, 0,
		informers.WithTweakListOptions(func(o *metav1.ListOptions) { o.LabelSelector = selector }))
	inf := factory.Core().V1().Nodes().Informer()
	w := &Watcher{t: t, store: inf.GetStore()}
	_, _ = inf.AddEventHandler(cache.ResourceEventHandlerFuncs{
		AddFunc:    func(any) { w.check() },
		UpdateFunc: func(any, any) { w.check() },
		DeleteFunc: func(any) { w.check() },
	})
	ctx, cancel := context.WithCancel(context.Background())
	factory.Start(ctx.Done())
	t.Cleanup(func() { cancel(); factory.Shutdown() })
	if !cache.WaitForCacheSync(ctx.Done(), inf.HasSynced) {
		t.Fatal("node watch of pool " + pool.Name + " did not sync")
	}
	return w
}

func (w *Watcher) check() {
	var unavailable []string
	for _, obj := range w.store.List() {
		if n := obj.(*corev1.Node); Unavailable(n) {
			unavailable = append(unavailable, n.Name)
		}
	}
	slices.Sort(unavailable)
	w.mu.Lock()
	defer w.mu.Unlock()
	w.now = unavailable
	if len(unavailable) > w.max {
		w.max, w.peak = len(unavailable), unavailable
	}
	if w.bound > 0 && len(unavailable) > w.bound {
		w.t.Errorf("invariant broken: %d nodes unavailable at once %v, bound %d", len(unavailable), unavailable, w.bound)
	}
}

// Bound makes the Watcher fail the test whenever more than n nodes are
// unavailable at once (n <= 0 removes the bound).
func (w *Watcher) Bound(n int) {
	w.mu.Lock()
	defer w.mu.Unlock()
	w.bound = n
}

// Max is the most nodes seen unavailable at the same time.
func (w *Watcher) Max() int {
	w.mu.Lock()
	defer w.mu.Unlock()
	return w.max
}

// Peak lists the nodes that were unavailable when Max was first reached.
func (w *Watcher) Peak() []string {
	w.mu.Lock()
	defer w.mu.Unlock()
	return slices.Clone(w.peak)
}

// Unavailable lists the nodes unavailable after the last event seen.
func (w *Watcher) Unavailable() []string {
	w.mu.Lock()
	defer w.mu.Unlock()
	return slices.Clone(w.now)
}

// Reset forgets the maximum, for a test that checks phases separately.
func (w *Watcher) Reset() {
	w.mu.Lock()
	defer w.mu.Unlock()
	w.max, w.peak = len(w.now), slices.Clone(w.now)
}
