package objectgate

import (
	"context"
	"log/slog"
	"slices"
	"sync"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/apimachinery/pkg/watch"
	"k8s.io/client-go/dynamic"
	"k8s.io/client-go/tools/cache"
)

// Key is what one watch reads: a resource in a namespace (empty: the
// cluster, or every namespace).
type Key struct {
	Resource  schema.GroupVersionResource
	Namespace string
}

// Watches keeps one informer per Key the pools name, started on first use
// and stopped by Retain once no pool names it. It is safe for concurrent
// use.
type Watches struct {
	dyn      dynamic.Interface
	log      *slog.Logger
	onChange func(Key)

	mu      sync.Mutex
	base    context.Context // nil until Run
	running map[Key]*watched
}

// watched is one running informer and the last error of its list, which
// fails the gates reading it until a list succeeds again: the cache may
// be stale or empty meanwhile.
type watched struct {
	informer cache.SharedIndexInformer
	stop     context.CancelFunc

	mu      sync.Mutex
	listErr error
}

func (w *watched) setListErr(err error) {
	w.mu.Lock()
	defer w.mu.Unlock()
	w.listErr = err
}

func (w *watched) lastListErr() error {
	w.mu.Lock()
	defer w.mu.Unlock()
	return w.listErr
}

// NewWatches reads through dyn; onChange runs with the watch's key on every
// add, update or delete of a watched object (the coordinator re-plans the
// pools gated on it).
func NewWatches(dyn dynamic.Interface, log *slog.Logger, onChange func(Key)) *Watches {
	return &Watches{dyn: dyn, log: log, onChange: onChange, running: map[Key]*watched{}}
}

// Start lets informers start until ctx ends, when they all stop.
func (ws *Watches) Start(ctx context.Context) {
	ws.mu.Lock()
	ws.base = ctx
	ws.mu.Unlock()
	go func() {
		<-ctx.Done()
		ws.Retain(nil)
	}()
}

// ensure returns key's informer, started now if it was not running; nil
// before Start or after its context ended.
func (ws *Watches) ensure(key Key) *watched {
	ws.mu.Lock()
	defer ws.mu.Unlock()
	if w, ok := ws.running[key]; ok {
		return w
	}
	if ws.base == nil || ws.base.Err() != nil {
		return nil
	}
	ctx, stop := context.WithCancel(ws.base)
	w := &watched{stop: stop}
	w.informer = cache.NewSharedIndexInformer(ws.listWatch(key, w), &unstructured.Unstructured{}, 0, cache.Indexers{})
	notify := func(any) { ws.onChange(key) }
	// AddEventHandler fails only on a stopped informer; this one has
	// not started.
	_, _ = w.informer.AddEventHandler(cache.ResourceEventHandlerFuncs{
		AddFunc: notify, UpdateFunc: func(_, n any) { notify(n) }, DeleteFunc: notify,
	})
	ws.running[key] = w
	ws.log.Info("watching objects for gates", "resource", key.Resource.String(), "namespace", key.Namespace)
	go w.informer.RunWithContext(ctx)
	return w
}

// listWatch reads key through the dynamic client, recording the outcome
// of each list and each watch in w: the reflector retries a failed one
// with backoff, and the gates say why meanwhile (forbidden, say). Watches
// count as well as lists: the reflector streams its initial list through
// a watch where the API server can (WatchList), and lists only when that
// fails.
func (ws *Watches) listWatch(key Key, w *watched) cache.ListerWatcher {
	api := ws.dyn.Resource(key.Resource).Namespace(key.Namespace)
	return &cache.ListWatch{
		ListWithContextFunc: func(ctx context.Context, o metav1.ListOptions) (runtime.Object, error) {
			list, err := api.List(ctx, o)
			w.setListErr(err)
			return list, err
		},
		WatchFuncWithContext: func(ctx context.Context, o metav1.ListOptions) (watch.Interface, error) {
			wi, err := api.Watch(ctx, o)
			w.setListErr(err)
			return wi, err
		},
	}
}

// Retain stops every informer whose key is not in keep.
func (ws *Watches) Retain(keep map[Key]bool) {
	ws.mu.Lock()
	defer ws.mu.Unlock()
	for key, w := range ws.running {
		if !keep[key] {
			w.stop()
			delete(ws.running, key)
			ws.log.Info("stopped watching objects for gates", "resource", key.Resource.String(), "namespace", key.Namespace)
		}
	}
}

// Running lists the keys watched now.
func (ws *Watches) Running() []Key {
	ws.mu.Lock()
	defer ws.mu.Unlock()
	keys := make([]Key, 0, len(ws.running))
	for k := range ws.running {
		keys = append(keys, k)
	}
	return keys
}

// sortedKeys lists store's keys in order, so that the first failing object
// named is the same from one evaluation to the next.
func sortedKeys(store cache.Store) []string {
	keys := store.ListKeys()
	slices.Sort(keys)
	return keys
}
