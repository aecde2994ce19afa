package coordinator

import (
	"iter"
	"strings"
	"sync"
	"time"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/client-go/tools/cache"
)

// nodeIndex is what a plan pass reads of every node, kept from the Node
// and Lease informers' events: each node's latest object and
// resourceVersion, its agent Lease's expiry and the pools' cached views and
// selections of it, in one entry per node reached without a lookup.
//
// A pass used to list the Node informer's store and then, per node, look
// up its cached entry and its Lease expiry by name. At 10,000 nodes most
// of that pass was the first touch of each Node object (its name and
// resourceVersion, scattered through a 120 MiB heap) and hashing names
// (docs/benchmarks.md, "Coordinator at 10,000 nodes"). The index keeps
// what decides whether a cached view still holds beside the view itself,
// so a pass touches a Node only when it changed.
//
// Ordering: the Node handler updates the index and only then checks the
// expectation its event may satisfy and enqueues the pools
// (Controller.onNode), reading the index, not the store, which may be
// ahead of it. A pass copies the expectations first and reads the index
// after, so a grant dropped from the copy is already in the index; and a
// pass that follows an event's enqueue reads the index with the event in
// it.
type nodeIndex struct {
	mu     sync.RWMutex
	byName map[string]*indexedNode
	// listed are the entries with a Node, in no order: what a pass
	// iterates. An entry's slot is its position here.
	listed []*indexedNode
}

// indexedNode is one node's entry. node and rv are nil and "" while only
// its Lease is known (slot -1); expiry is 0 while it has no renewed
// Lease. The handlers write node, rv and expiry under the write lock;
// views are the one worker's, written during a pass under the read lock
// (no handler touches them).
type indexedNode struct {
	name   string
	node   *corev1.Node
	rv     string
	slot   int
	expiry int64 // the agent Lease's expiry, Unix nanoseconds
	// views are the pools' cached views and selections of the node, by
	// viewCache slot: the first pool's inline, the others after it.
	first cachedNode
	more  []cachedNode
}

func newNodeIndex() *nodeIndex { return &nodeIndex{byName: map[string]*indexedNode{}} }

// nodeHandler keeps the nodes from a Node informer's events; then, for
// each event, after the index holds it, calls then with the node before
// and after it (old nil for an add, cur nil for a delete).
// beforeRemove, when set, runs with a deleted node before the index drops
// it (departures), and with the old object of an update that replaces it
// by another of the same name (another UID): a relist after the watch
// broke delivers a Node deleted and registered again meanwhile as one
// update, not as a delete and an add.
func (x *nodeIndex) nodeHandler(beforeRemove func(*corev1.Node), then func(old, cur *corev1.Node)) cache.ResourceEventHandlerFuncs {
	h := indexHandler(x.setNode, func(n *corev1.Node) {
		if beforeRemove != nil {
			beforeRemove(n)
		}
		x.removeNode(n.Name)
	}, then)
	if beforeRemove == nil {
		return h
	}
	update := h.UpdateFunc
	h.UpdateFunc = func(oldObj, obj any) {
		old, ok := oldObj.(*corev1.Node)
		if cur, isNode := obj.(*corev1.Node); ok && isNode && old.UID != cur.UID {
			beforeRemove(old)
		}
		update(oldObj, obj)
	}
	return h
}

// indexHandler is an informer's event handler that keeps an index with set
// and remove, and then calls then with the object before and after the
// event (old nil for an add, or for an update from an object of another
// type; cur nil for a delete, seen whole or as a tombstone). Objects of
// another type are ignored.
func indexHandler[T comparable](set, remove func(T), then func(old, cur T)) cache.ResourceEventHandlerFuncs {
	var none T
	return cache.ResourceEventHandlerFuncs{
		AddFunc: func(obj any) {
			if cur, ok := obj.(T); ok {
				set(cur)
				then(none, cur)
			}
		},
		UpdateFunc: func(oldObj, obj any) {
			if cur, ok := obj.(T); ok {
				set(cur)
				old, _ := oldObj.(T)
				then(old, cur)
			}
		},
		DeleteFunc: func(obj any) {
			if tomb, ok := obj.(cache.DeletedFinalStateUnknown); ok {
				obj = tomb.Obj
			}
			if old, ok := obj.(T); ok {
				remove(old)
				then(old, none)
			}
		},
	}
}

// entry is name's entry, made when absent. Callers hold the write lock.
func (x *nodeIndex) entry(name string) *indexedNode {
	e := x.byName[name]
	if e == nil {
		// The name's own copy: names of entries made one after another
		// sit together in the heap, where a pass that reads or hashes
		// every name finds them, not in each Node's memory.
		e = &indexedNode{name: strings.Clone(name), slot: -1}
		x.byName[name] = e
	}
	return e
}

func (x *nodeIndex) setNode(n *corev1.Node) {
	x.mu.Lock()
	defer x.mu.Unlock()
	e := x.entry(n.Name)
	e.node, e.rv = n, n.ResourceVersion
	if e.slot < 0 {
		e.slot = len(x.listed)
		x.listed = append(x.listed, e)
	}
}

func (x *nodeIndex) removeNode(name string) {
	x.mu.Lock()
	defer x.mu.Unlock()
	e := x.byName[name]
	if e == nil || e.slot < 0 {
		return
	}
	last := x.listed[len(x.listed)-1]
	x.listed[e.slot], last.slot = last, e.slot
	x.listed[len(x.listed)-1] = nil
	x.listed = x.listed[:len(x.listed)-1]
	// A node deleted and made again under its name starts with no
	// cached views: the entry goes unless its Lease keeps it.
	e.node, e.rv, e.slot, e.first, e.more = nil, "", -1, cachedNode{}, nil
	x.forgetIfEmpty(e)
}

// forgetIfEmpty drops e when neither a Node nor a renewed Lease is known.
func (x *nodeIndex) forgetIfEmpty(e *indexedNode) {
	if e.node == nil && e.expiry == 0 {
		delete(x.byName, e.name)
	}
}

// node is name's latest Node in the index, or nil.
func (x *nodeIndex) node(name string) *corev1.Node {
	x.mu.RLock()
	defer x.mu.RUnlock()
	if e := x.byName[name]; e != nil {
		return e.node
	}
	return nil
}

// aliveAt reports whether the node's agent Lease was renewed within its
// duration at nowNs (Unix nanoseconds).
func (e *indexedNode) aliveAt(nowNs int64) bool { return e.expiry != 0 && nowNs < e.expiry }

// read calls f with the listed nodes, for a pass of the viewCache slot
// slot at now, under the read lock: f must not keep what it is given.
func (x *nodeIndex) read(slot int, now time.Time, f func(nodes iter.Seq[listedNode])) {
	x.mu.RLock()
	defer x.mu.RUnlock()
	nowNs := now.UnixNano()
	f(func(yield func(listedNode) bool) {
		for _, e := range x.listed {
			if !yield(listedNode{node: e.node, name: e.name, rv: e.rv, leaseOK: e.aliveAt(nowNs), cache: e.views(slot)}) {
				return
			}
		}
	})
}

// views is the entry's cached views for the viewCache slot slot.
func (e *indexedNode) views(slot int) *cachedNode {
	if slot == 0 {
		return &e.first
	}
	if len(e.more) < slot {
		e.more = append(e.more, make([]cachedNode, slot-len(e.more))...)
	}
	return &e.more[slot-1]
}

// listedNode is what a pass reads of one node: the Node, touched only to
// build a view or a selection afresh, its name, its resourceVersion, its agent's
// liveness and its cached views (nil: none, built afresh).
type listedNode struct {
	node    *corev1.Node
	name    string
	rv      string
	leaseOK bool
	cache   *cachedNode
}

// listNodes is nodes as a pass reads them without an index or a cache
// (buildInput).
func listNodes(nodes []*corev1.Node, agentAlive func(string) bool) iter.Seq[listedNode] {
	return func(yield func(listedNode) bool) {
		for _, n := range nodes {
			if !yield(listedNode{node: n, name: n.Name, rv: n.ResourceVersion, leaseOK: agentAlive(n.Name)}) {
				return
			}
		}
	}
}
