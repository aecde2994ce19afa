package chaos

import (
	"context"
	"fmt"
	"slices"
	"strings"
	"sync"
	"time"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/labels"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/util/intstr"
	"k8s.io/apimachinery/pkg/watch"
	"k8s.io/client-go/dynamic"
	"k8s.io/client-go/kubernetes"

	"github.com/nodeward/nodeward/test/oracle"
)

// The protocol keys the watcher reads, spelled out from docs/protocol.md
// on purpose: the watcher shares no code with the product's definition of
// an unavailable node (v1alpha1.Unavailable, Step.Disrupting), so that a
// mistake there cannot hide here; which nodes are disrupted is test/oracle's
// to say, which is just as independent.
const (
	keyGrant           = "update.nodeward.io/grant"
	keyState           = "update.nodeward.io/state"
	keyStateGrant      = "update.nodeward.io/state-grant"
	keyStateTarget     = "update.nodeward.io/state-target"
	keyGrantPool       = "update.nodeward.io/grant-pool"
	keyCordonedBy      = "update.nodeward.io/cordoned-by"
	preDrainHookPrefix = "pre-drain.hook.nodeward.io/"
	controlPlaneLabel  = "node-role.kubernetes.io/control-plane"
	masterLabel        = "node-role.kubernetes.io/master"
)

// Violation kinds.
const (
	// VMaxUnavailable: a new grant was written in a pool while the pool
	// already had maxUnavailable or more nodes disrupted.
	VMaxUnavailable = "maxUnavailable"
	// VControlPlane: more than one control-plane node disrupted at once,
	// cluster-wide.
	VControlPlane = "control-plane"
	// VRebootUndrained: a node finalized or rebooted without a completed
	// drain since it was last schedulable, or its machine went down with
	// pods still bound to it.
	VRebootUndrained = "reboot-without-drain"
	// VAdminUncordon: a node an admin cordoned became schedulable before
	// the admin uncordoned it.
	VAdminUncordon = "uncordon-of-admin-cordon"
	// VHookIgnored: a node went past its pre-drain gate (to Cordoning or
	// Draining) while a pre-drain hook had been on it for longer than the
	// hook grace.
	VHookIgnored = "pre-drain-hook-ignored"
)

// Violation is one broken invariant, as the watcher saw it.
type Violation struct {
	At     time.Time
	Kind   string
	Pool   string
	Nodes  []string
	Detail string
}

func (v Violation) String() string {
	pool := ""
	if v.Pool != "" {
		pool = " pool " + v.Pool
	}
	return fmt.Sprintf("%s %s%s nodes %v: %s", v.At.Format("15:04:05.000"), v.Kind, pool, v.Nodes, v.Detail)
}

// disrupted is the watcher's definition of a node taken out of service by
// an update: oracle.UpdateDisruption, the tests' one definition (a grant
// its agent has not reported Done or Yielded for, an agent step from
// Cordoning to Uncordoning or a side step between them, or nodeward's
// cordon record). An admin's cordon and a machine gone down are not
// counted: they are faults the chaos run injects, which no coordinator can
// see in time.
func disrupted(n *corev1.Node) bool {
	return oracle.UpdateDisruption.Counts(n)
}

// WatcherOptions configure a Watcher.
type WatcherOptions struct {
	Client  kubernetes.Interface
	Dynamic dynamic.Interface
	// PoolSelector picks the UpdatePools to watch (label selector).
	PoolSelector string
	// Grace covers what no coordinator can see in time: a grant written
	// within Grace after maxUnavailable was lowered is judged against the
	// previous limit, and a node relabelled into a pool less than Grace
	// before a grant does not count against it. Default 5 s.
	Grace time.Duration
	// HookGrace is how long a pre-drain hook must have been visible before
	// passing the pre-drain gate counts as ignoring it (the agent may have
	// decided on a copy of its Node from just before). Default 10 s.
	HookGrace time.Duration
	// PolicyGrace is how long after a pool's drain policy left Force a
	// node may still act on Force (the coordinator rewrites it on the
	// nodes in flight once a leader sees the change). Default 30 s.
	PolicyGrace time.Duration
	// Log receives progress lines (nil: none).
	Log func(format string, args ...any)
	// Now is the clock (default time.Now), for the watcher's own tests.
	Now func() time.Time
}

// Watcher is the independent invariant watcher: its own watches of Nodes
// and UpdatePools (list, then watch from the list's resourceVersion,
// resumed after every break; a relist after an expired resourceVersion is a
// gap, counted), its own definition of disrupted, and a record of every
// violation with its time and nodes.
type Watcher struct {
	opts WatcherOptions

	mu         sync.Mutex
	nodes      map[string]*nodeRec
	pools      map[string]*poolRec
	admin      map[string]bool // nodes an admin cordoned and has not uncordoned
	departed   map[string]*departure
	pins       map[string]*pin           // PDB-blocked pods by UID
	policies   map[string][]policyChange // drain policies by pool name, kept across deletions
	poolGone   map[string]time.Time      // when a pool was last deleted
	deleted    map[string]bool           // names whose Node was deleted once
	violations []Violation
	cpOver     bool // more than one control-plane node disrupted right now
	halts      haltLog
	stats      Stats
	synced     chan struct{}
	syncedN    int
}

type nodeRec struct {
	node *corev1.Node
	// pool is the first pool (by name) selecting the node, sel every
	// pool selecting it; joined holds when a relabel moved the node into a
	// pool of sel (absent: selected from the start or by a pool change).
	pool   string
	sel    []string
	joined map[string]time.Time
	// drained: Draining was seen since the node was last schedulable;
	// gap: a watch gap may have hidden steps since then; flagged: a
	// reboot-without-drain was recorded since then.
	drained, gap, flagged bool
	hooks                 map[string]time.Time // pre-drain hooks and when first seen
	step                  string
	cordonedAt            time.Time // when the watcher last saw it turn unschedulable
	// reborn: a Node of this name was deleted before this one registered.
	reborn bool
}

type poolRec struct {
	name         string
	selector     labels.Selector
	controlPlane bool
	target       string
	history      []limitChange
}

type limitChange struct {
	at  time.Time
	max *intstr.IntOrString
}

// NewWatcher returns a watcher; Run starts it.
func NewWatcher(opts WatcherOptions) *Watcher {
	if opts.Grace == 0 {
		opts.Grace = 5 * time.Second
	}
	if opts.HookGrace == 0 {
		opts.HookGrace = 10 * time.Second
	}
	if opts.PolicyGrace == 0 {
		opts.PolicyGrace = 30 * time.Second
	}
	if opts.Log == nil {
		opts.Log = func(string, ...any) {}
	}
	if opts.Now == nil {
		opts.Now = time.Now
	}
	return &Watcher{opts: opts, nodes: map[string]*nodeRec{}, pools: map[string]*poolRec{},
		admin: map[string]bool{}, departed: map[string]*departure{}, pins: map[string]*pin{},
		policies: map[string][]policyChange{}, poolGone: map[string]time.Time{},
		deleted: map[string]bool{}, stats: Stats{MaxDisrupted: map[string]int{}}, synced: make(chan struct{})}
}

// Run watches until ctx ends.
func (w *Watcher) Run(ctx context.Context) {
	var wg sync.WaitGroup
	wg.Go(func() { w.loop(ctx, "pools", w.listPools, w.watchPools, w.replacePools, w.poolEvent) })
	wg.Go(func() { w.loop(ctx, "nodes", w.listNodes, w.watchNodes, w.replaceNodes, w.nodeEvent) })
	wg.Wait()
}

// WaitSynced waits for the first list of pools and of nodes.
func (w *Watcher) WaitSynced(ctx context.Context) error {
	select {
	case <-w.synced:
		return nil
	case <-ctx.Done():
		return fmt.Errorf("watcher: first lists: %w", ctx.Err())
	}
}

// replaceNodes applies a (re)list: the whole snapshot first, then the
// checks for each node that changed, so that a grant that appeared during
// a gap is judged against the same consistent snapshot.
func (w *Watcher) replaceNodes(objs []runtime.Object, gap bool) {
	w.mu.Lock()
	defer w.mu.Unlock()
	seen := map[string]bool{}
	type change struct {
		rec      *nodeRec
		old, cur *corev1.Node
	}
	var changed []change
	for _, o := range objs {
		n := o.(*corev1.Node)
		seen[n.Name] = true
		rec := w.recFor(n)
		old := rec.node
		if old != nil && old.ResourceVersion == n.ResourceVersion {
			continue
		}
		rec.node = n
		changed = append(changed, change{rec, old, n})
	}
	for name, rec := range w.nodes {
		if !seen[name] {
			w.depart(name, rec.node)
		}
	}
	for _, c := range changed {
		w.observeNode(c.rec, c.old, c.cur, gap)
	}
	w.stats.NodeEvents += len(changed)
}

func (w *Watcher) nodeEvent(t watch.EventType, obj runtime.Object) {
	n, ok := obj.(*corev1.Node)
	if !ok {
		return
	}
	w.mu.Lock()
	defer w.mu.Unlock()
	w.stats.NodeEvents++
	if t == watch.Deleted {
		w.depart(n.Name, n)
		w.checkControlPlane(w.opts.Now())
		return
	}
	rec := w.recFor(n)
	old := rec.node
	rec.node = n
	w.observeNode(rec, old, n, false)
}

// recFor returns the record of n's name, a new one when there is none or
// when n is another Node object of that name (a new UID: the old one was
// deleted, maybe unseen in a watch gap).
func (w *Watcher) recFor(n *corev1.Node) *nodeRec {
	rec := w.nodes[n.Name]
	if rec != nil && rec.node != nil && rec.node.UID != n.UID {
		w.depart(n.Name, rec.node)
		rec = nil
	}
	if rec == nil {
		rec = &nodeRec{hooks: map[string]time.Time{}, joined: map[string]time.Time{}, reborn: w.deleted[n.Name]}
		w.nodes[n.Name] = rec
	}
	return rec
}

// observeNode runs every check on one node's change from old (nil when
// first seen) to cur; the cache already holds cur. gap: the change was
// learned from a relist, intermediate states may be missing.
func (w *Watcher) observeNode(rec *nodeRec, old, cur *corev1.Node, gap bool) {
	now := w.opts.Now()
	w.returned(cur)
	w.trackPools(rec, old, cur, now)
	rec.trackHooks(cur, now)
	w.checkSchedulability(rec, old, cur, now, gap)
	if step := cur.Annotations[keyState]; step != rec.step {
		prev := rec.step
		rec.step = step
		w.checkStep(rec, cur, prev, now)
	}
	// A new grant: the pool must have had fewer than maxUnavailable nodes
	// disrupted besides this one.
	if old != nil {
		if g := cur.Annotations[keyGrant]; g != "" && g != old.Annotations[keyGrant] {
			w.checkGrant(rec, cur, g, now, gap)
			if !gap { // a relist's resourceVersion is not the grant's write
				w.halts.grant(w.issuingPool(rec, cur), cur.Name, g, parseRV(cur.ResourceVersion), now)
			}
		}
	}
	w.checkControlPlane(now)
	w.countDisrupted(rec)
}

// trackPools records the pools selecting cur, and when a relabel moved it
// into one of them (a pool change is not a relabel: see remember).
func (w *Watcher) trackPools(rec *nodeRec, old, cur *corev1.Node, now time.Time) {
	relabelled := old != nil && !labels.Equals(old.Labels, cur.Labels)
	sel := w.poolsOf(cur)
	for p := range rec.joined {
		if !slices.Contains(sel, p) {
			delete(rec.joined, p)
		}
	}
	for _, p := range sel {
		if relabelled && !slices.Contains(rec.sel, p) {
			rec.joined[p] = now
		}
	}
	rec.setPools(sel)
}

// trackHooks keeps the node's pre-drain hooks with the time each was first
// seen, for the hook grace.
func (r *nodeRec) trackHooks(cur *corev1.Node, now time.Time) {
	for k := range r.hooks {
		if _, ok := cur.Annotations[k]; !ok {
			delete(r.hooks, k)
		}
	}
	for k := range cur.Annotations {
		if strings.HasPrefix(k, preDrainHookPrefix) {
			if _, ok := r.hooks[k]; !ok {
				r.hooks[k] = now
			}
		}
	}
}

// checkSchedulability: an uncordon ends a drain's validity, and must not
// undo an admin's cordon; a cordon starts the record of what happened
// while the node was unschedulable.
func (w *Watcher) checkSchedulability(rec *nodeRec, old, cur *corev1.Node, now time.Time, gap bool) {
	wasCordoned := old != nil && old.Spec.Unschedulable
	if cur.Spec.Unschedulable {
		if !wasCordoned {
			rec.cordonedAt = now
		}
		if gap {
			rec.gap = true
		}
		return
	}
	if wasCordoned && w.admin[cur.Name] {
		a := cur.Annotations
		w.record(Violation{At: now, Kind: VAdminUncordon, Pool: rec.pool, Nodes: []string{cur.Name},
			Detail: fmt.Sprintf("an admin's cordon was removed (state %s, grant %q, resourceVersion %s)",
				a[keyState], a[keyGrant], cur.ResourceVersion)})
	}
	rec.drained, rec.gap, rec.flagged = false, false, false
}

// countDisrupted updates the most disrupted nodes seen at once in every
// pool rec counts in.
func (w *Watcher) countDisrupted(rec *nodeRec) {
	for p := range w.pools {
		if !rec.memberOf(p) {
			continue
		}
		_, counted := w.countedIn(p, w.opts.Now(), false)
		n := len(disruptedAmong(counted, p, ""))
		w.stats.MaxDisrupted[p] = max(w.stats.MaxDisrupted[p], n)
	}
}

func (r *nodeRec) setPools(sel []string) {
	r.sel = sel
	r.pool = ""
	if len(sel) > 0 {
		r.pool = sel[0]
	}
}

// memberOf reports whether the node counts in pool p: p selects it, or it
// holds a grant p issued (docs/protocol.md: a pool counts the nodes holding
// its grants until they are released, relabelled or not).
func (r *nodeRec) memberOf(p string) bool {
	if slices.Contains(r.sel, p) {
		return true
	}
	a := r.node.Annotations
	return a[keyGrant] != "" && a[keyGrantPool] == p
}

// issuingPool is the pool that judges cur's grant: the one named by
// grant-pool, else the one selecting the node.
func (w *Watcher) issuingPool(rec *nodeRec, cur *corev1.Node) string {
	if name := cur.Annotations[keyGrantPool]; name != "" {
		return name
	}
	return rec.pool
}

func (w *Watcher) checkGrant(rec *nodeRec, cur *corev1.Node, grant string, now time.Time, gap bool) {
	name := w.issuingPool(rec, cur)
	p := w.pools[name]
	if p == nil {
		w.grantOfNoPool(cur, name, grant, now)
		return
	}
	w.stats.Grants++
	members, counted := w.countedIn(p.name, now, true)
	limit := w.limitAt(p, members, now)
	others := disruptedAmong(counted, p.name, cur.Name)
	if len(others) < limit {
		return
	}
	how := ""
	if gap {
		how = " (seen on a relist after a watch gap)"
	}
	w.record(Violation{At: now, Kind: VMaxUnavailable, Pool: p.name, Nodes: append([]string{cur.Name}, others...),
		Detail: fmt.Sprintf("grant %q written on %s (resourceVersion %s) while %d nodes were already disrupted, limit %d%s: %s",
			grant, cur.Name, cur.ResourceVersion, len(others), limit, how, w.describe(others))})
}

// describe lists nodes with their state, grant and cordon record.
func (w *Watcher) describe(names []string) string {
	parts := make([]string, 0, len(names))
	for _, name := range names {
		n := w.lastSeen(name)
		if n == nil {
			parts = append(parts, name+"[unknown]")
			continue
		}
		a := n.Annotations
		_, rec := a[keyCordonedBy]
		gone := ""
		if w.departed[name] != nil {
			gone = " departed"
		}
		parts = append(parts, fmt.Sprintf("%s[state=%s state-grant=%q grant=%q grant-pool=%q soak-until=%q cordoned-by=%v unschedulable=%v%s]",
			name, a[keyState], a[keyStateGrant], a[keyGrant], a[keyGrantPool], a[keySoakUntil], rec, n.Spec.Unschedulable, gone))
	}
	return strings.Join(parts, " ")
}

func (w *Watcher) checkControlPlane(now time.Time) {
	over := oracle.UpdateDisruption.ControlPlaneExcess(w.clusterNodes())
	if over == nil {
		w.cpOver = false
		return
	}
	if w.cpOver {
		return
	}
	w.cpOver = true
	down := over.Nodes
	w.record(Violation{At: now, Kind: VControlPlane, Nodes: down,
		Detail: fmt.Sprintf("%d control-plane nodes disrupted: %s", len(down), w.describe(down))})
}

func (w *Watcher) record(v Violation) {
	w.violations = append(w.violations, v)
	w.opts.Log("VIOLATION %s", v)
}

// AdminCordoned tells the watcher an admin is about to cordon node: from
// the cordon until AdminUncordoned, only the admin may make it schedulable.
func (w *Watcher) AdminCordoned(node string) {
	w.mu.Lock()
	defer w.mu.Unlock()
	w.admin[node] = true
}

// AdminUncordoned tells the watcher the admin is about to uncordon node
// (or that its cordon did not land).
func (w *Watcher) AdminUncordoned(node string) {
	w.mu.Lock()
	defer w.mu.Unlock()
	delete(w.admin, node)
}
