package coordinator_test

import (
	"context"
	"log/slog"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/dynamic"
	"k8s.io/client-go/tools/cache"
	"k8s.io/utils/ptr"

	"github.com/nodeward/nodeward/api/v1alpha1"
	"github.com/nodeward/nodeward/coordinator"
	"github.com/nodeward/nodeward/test/cluster"
)

// TestNodeDeletedMidUpdateKeepsCounting: the Node object of a granted node
// deleted while its machine reboots (a cloud controller, an admin) does not
// free its slot. With maxUnavailable 1 no other node is granted, across a
// coordinator restart too (the pool records it), until a Node of its name
// registers again, serves and its agent reports the update finished; then
// the rollout goes on and the record is gone.
func TestNodeDeletedMidUpdateKeepsCounting(t *testing.T) {
	t.Parallel()
	const prefix = "departed"
	r := newRig(t, prefix, 3, 1)
	cp, dyn, ctx, agents := r.cp, r.dyn, r.ctx, r.agents
	createPool(t, dyn, prefix, &v1alpha1.UpdatePool{ObjectMeta: metav1.ObjectMeta{Name: prefix}, Spec: v1alpha1.UpdatePoolSpec{
		NodeSelector: groupSelector(prefix), OSImage: "os:dep1", MaxUnavailable: ptr.To(intstrInt(1)),
	}})
	first, stopFirst := context.WithCancel(ctx)
	runCoordinator(first, t, cp, dyn, prefix)

	g, gone := deleteRebooting(ctx, t, cp, agents)
	agents.noGrantFor(t, 3*time.Second, "while the deleted node's machine reboots")
	waitPoolAnnotation(t, dyn, prefix, v1alpha1.AnnotationDepartedNodes, g.node, 30*time.Second)
	waitPoolCondition(t, dyn, prefix, v1alpha1.PoolUpdating, 30*time.Second, g.node+" (Node object deleted mid-update")

	// A new leader knows it from the pool alone.
	stopFirst()
	runCoordinator(ctx, t, cp, dyn, prefix)
	agents.noGrantFor(t, 3*time.Second, "by a restarted coordinator while the deleted node's machine reboots")

	// The machine is back: its kubelet registers the Node again, Ready
	// before the machine's agent starts on it. Until the agent reports, the
	// Node does not say whether the machine is done with the grant (chaos
	// seed 808547352 granted the next control-plane node here).
	registerAgain(ctx, t, cp, gone)
	agents.noGrantFor(t, 3*time.Second, "while the registered Node carries no report of the machine's agent")
	// The agent reports where it stands: still mid-update, which counts.
	agents.mustReport(ctx, t, g, v1alpha1.StepVerifying)
	agents.noGrantFor(t, 3*time.Second, "while the machine's agent reports Verifying on the registered Node")
	agents.mustReport(ctx, t, g, v1alpha1.StepDone)
	next := agents.next(t, time.Minute)
	if next.grant == g.grant {
		t.Fatalf("the departed grant %s came back", g.grant)
	}
	waitPoolAnnotation(t, dyn, prefix, v1alpha1.AnnotationDepartedNodes, "", 30*time.Second)
}

// waitPoolAnnotation waits until the pool's annotation key contains want
// ("" waits until it is absent).
func waitPoolAnnotation(t *testing.T, dyn dynamic.Interface, pool, key, want string, timeout time.Duration) {
	t.Helper()
	cluster.WaitFor(t, timeout, "pool "+pool+" annotation "+key+" with "+want, func(ctx context.Context) (bool, error) {
		p, err := dyn.Resource(v1alpha1.UpdatePoolResource()).Get(ctx, pool, metav1.GetOptions{})
		if err != nil {
			return false, err
		}
		got, ok := p.GetAnnotations()[key]
		if want == "" {
			return !ok, nil
		}
		return strings.Contains(got, want), nil
	})
}

// TestNodeDeletedUnderAnUnseenGrantKeepsCounting: a grant the coordinator
// wrote but its node cache never showed (the watch lost the update), whose
// Node is then deleted and delivered as a relist's tombstone carrying the
// cached copy, without the grant, still counts: the machine may have taken
// the grant and be rebooting. With maxUnavailable 1 no other node is
// granted, and the pool records the departure under that grant, until a
// Node of its name registers again, serves and its agent reports.
func TestNodeDeletedUnderAnUnseenGrantKeepsCounting(t *testing.T) {
	t.Parallel()
	const prefix = "unseen"
	r := newRig(t, prefix, 3, 1)
	cp, dyn, ctx, agents := r.cp, r.dyn, r.ctx, r.agents
	createPool(t, dyn, prefix, &v1alpha1.UpdatePool{ObjectMeta: metav1.ObjectMeta{Name: prefix}, Spec: v1alpha1.UpdatePoolSpec{
		NodeSelector: groupSelector(prefix), OSImage: "os:unseen1", MaxUnavailable: ptr.To(intstrInt(1)),
	}})
	lost := newLostGrants(r.nodes)
	runCoordinator(ctx, t, cp, dyn, prefix, func(o *coordinator.Config) { coordinator.SetNodeEventsHook(o, lost.wrap) })

	g, gone := deleteRebooting(ctx, t, cp, agents)
	cluster.WaitFor(t, 30*time.Second, "the tombstone of "+g.node+" delivered", func(context.Context) (bool, error) {
		return lost.tombstoned(g.node), nil
	})
	agents.noGrantFor(t, 3*time.Second, "while the machine of a Node deleted under a grant the cache never showed reboots")
	waitPoolAnnotation(t, dyn, prefix, v1alpha1.AnnotationDepartedNodes, `"grant":"`+g.grant+`"`, 30*time.Second)
	waitPoolAnnotation(t, dyn, prefix, v1alpha1.AnnotationDepartedNodes, `"`+g.node+`"`, time.Second)

	// The machine is back and its agent reports its update finished.
	registerAgain(ctx, t, cp, gone)
	agents.mustReport(ctx, t, g, v1alpha1.StepDone)
	if next := agents.next(t, time.Minute); next.grant == g.grant {
		t.Fatalf("the departed grant %s came back", g.grant)
	}
	waitPoolAnnotation(t, dyn, prefix, v1alpha1.AnnotationDepartedNodes, "", 30*time.Second)
}

// lostGrants wraps the coordinator's node index handler: of the nodes it
// names, it withholds every update of a Node that holds a grant (a watch
// that lost them) and delivers a delete as a relist's tombstone carrying
// the copy it delivered last.
type lostGrants struct {
	next  cache.ResourceEventHandler
	nodes map[string]bool

	mu    sync.Mutex
	last  map[string]*corev1.Node
	tombs map[string]bool
}

func newLostGrants(nodes []string) *lostGrants {
	l := &lostGrants{nodes: map[string]bool{}, last: map[string]*corev1.Node{}, tombs: map[string]bool{}}
	for _, n := range nodes {
		l.nodes[n] = true
	}
	return l
}

func (l *lostGrants) wrap(next cache.ResourceEventHandler) cache.ResourceEventHandler {
	l.next = next
	return l
}

func (l *lostGrants) OnAdd(obj any, initial bool) {
	if n, ok := obj.(*corev1.Node); ok && l.nodes[n.Name] {
		l.mu.Lock()
		l.last[n.Name] = n
		l.mu.Unlock()
	}
	l.next.OnAdd(obj, initial)
}

func (l *lostGrants) OnUpdate(oldObj, obj any) {
	n, ok := obj.(*corev1.Node)
	if !ok || !l.nodes[n.Name] {
		l.next.OnUpdate(oldObj, obj)
		return
	}
	if n.Annotations[v1alpha1.AnnotationGrant] != "" {
		return
	}
	l.mu.Lock()
	old := l.last[n.Name]
	l.last[n.Name] = n
	l.mu.Unlock()
	l.next.OnUpdate(old, obj)
}

func (l *lostGrants) OnDelete(obj any) {
	n, ok := obj.(*corev1.Node)
	if !ok || !l.nodes[n.Name] {
		l.next.OnDelete(obj)
		return
	}
	l.mu.Lock()
	last := l.last[n.Name]
	delete(l.last, n.Name)
	l.tombs[n.Name] = true
	l.mu.Unlock()
	l.next.OnDelete(cache.DeletedFinalStateUnknown{Key: n.Name, Obj: last})
}

func (l *lostGrants) tombstoned(node string) bool {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.tombs[node]
}

// A Node deleted under a grant and registered again before the watch
// delivered the delete reaches the informer, after a relist, as one update
// from the old object to the new one (another UID). The machine departed
// all the same: the pool counts it until the new Node serves, although the
// new Node (registered without the pool's labels, as a kubelet does before
// an operator labels it) is not the pool's.
func TestNodeReplacedWithinARelistKeepsCounting(t *testing.T) {
	t.Parallel()
	const prefix = "relisted"
	r := newRig(t, prefix, 3, 1)
	cp, dyn, ctx, agents := r.cp, r.dyn, r.ctx, r.agents
	createPool(t, dyn, prefix, &v1alpha1.UpdatePool{ObjectMeta: metav1.ObjectMeta{Name: prefix}, Spec: v1alpha1.UpdatePoolSpec{
		NodeSelector: groupSelector(prefix), OSImage: "os:relisted1", MaxUnavailable: ptr.To(intstrInt(1)),
	}})
	relist := &relisted{withheld: map[string]*corev1.Node{}}
	runCoordinator(ctx, t, cp, dyn, prefix, func(o *coordinator.Config) { coordinator.SetNodeEventsHook(o, relist.wrap) })

	g := agents.next(t, time.Minute)
	agents.mustReport(ctx, t, g, v1alpha1.StepRebooting)
	gone := getNode(ctx, t, cp, g.node)
	relist.hold(g.node)
	replaceNode(ctx, t, cp, gone)
	cluster.WaitFor(t, 30*time.Second, "the replacement of "+g.node+" delivered as one update", func(context.Context) (bool, error) {
		return relist.delivered(g.node), nil
	})
	agents.noGrantFor(t, 3*time.Second, "while the machine of a Node replaced within a relist reboots")
	waitPoolAnnotation(t, dyn, prefix, v1alpha1.AnnotationDepartedNodes, `"grant":"`+g.grant+`"`, 30*time.Second)
}

// relisted wraps the coordinator's node index handler: once hold names a
// node, its delete is withheld and the next add of that name is delivered
// as an update from the withheld object, as a relist after a broken watch
// delivers a Node deleted and created again.
type relisted struct {
	next cache.ResourceEventHandler

	mu       sync.Mutex
	holding  string
	withheld map[string]*corev1.Node
	replaced map[string]bool
}

func (r *relisted) wrap(next cache.ResourceEventHandler) cache.ResourceEventHandler {
	r.next = next
	return r
}

func (r *relisted) hold(node string) {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.holding = node
}

func (r *relisted) delivered(node string) bool {
	r.mu.Lock()
	defer r.mu.Unlock()
	return r.replaced[node]
}

func (r *relisted) OnAdd(obj any, initial bool) {
	n, ok := obj.(*corev1.Node)
	r.mu.Lock()
	old := r.withheld[nameOf(n, ok)]
	if old != nil {
		delete(r.withheld, n.Name)
		if r.replaced == nil {
			r.replaced = map[string]bool{}
		}
		r.replaced[n.Name] = true
	}
	r.mu.Unlock()
	if old != nil {
		r.next.OnUpdate(old, obj)
		return
	}
	r.next.OnAdd(obj, initial)
}

func (r *relisted) OnUpdate(oldObj, obj any) { r.next.OnUpdate(oldObj, obj) }

func (r *relisted) OnDelete(obj any) {
	n, ok := obj.(*corev1.Node)
	r.mu.Lock()
	held := ok && n.Name == r.holding
	if held {
		r.withheld[n.Name], r.holding = n, ""
	}
	r.mu.Unlock()
	if !held {
		r.next.OnDelete(obj)
	}
}

func nameOf(n *corev1.Node, ok bool) string {
	if !ok {
		return ""
	}
	return n.Name
}

// A grant the node cache never showed, its Node then deleted and registered
// again while the watch is down: the expectation's check finds a Node of the
// name with another UID, and the relist delivers the replacement as one
// update from the cached copy, which shows no grant. The old object may have
// taken the grant, so the machine departs under it at the check, and the
// index's stale copy of the old object, serving, is not the machine back.
// It was dropped as "changed without the grant" and counted nowhere.
func TestGrantToANodeReplacedUnseenKeepsCounting(t *testing.T) {
	t.Parallel()
	const prefix = "replaced"
	r := newRig(t, prefix, 3, 1)
	cp, dyn, ctx, agents := r.cp, r.dyn, r.ctx, r.agents
	createPool(t, dyn, prefix, &v1alpha1.UpdatePool{ObjectMeta: metav1.ObjectMeta{Name: prefix}, Spec: v1alpha1.UpdatePoolSpec{
		NodeSelector: groupSelector(prefix), OSImage: "os:replaced1", MaxUnavailable: ptr.To(intstrInt(1)),
	}})
	unseen := &frozenGrants{frozen: map[string]*corev1.Node{}}
	logs := &logLines{t: t}
	runCoordinator(ctx, t, cp, dyn, prefix, func(o *coordinator.Config) {
		o.ExpectationTimeout = time.Second
		o.Log = slog.New(slog.NewTextHandler(logs, nil))
		coordinator.SetNodeEventsHook(o, unseen.wrap)
	})

	g := agents.next(t, time.Minute)
	unseen.freeze(g.node)
	agents.mustReport(ctx, t, g, v1alpha1.StepRebooting)
	gone := getNode(ctx, t, cp, g.node)
	replaceNode(ctx, t, cp, gone)
	cluster.WaitFor(t, 30*time.Second, "the expectation on "+g.node+" checked against the API", func(context.Context) (bool, error) {
		return logs.has("grant expectation dropped"), nil
	})
	agents.noGrantFor(t, 3*time.Second, "while the watch is down and the machine of a Node replaced under an unseen grant reboots")
	unseen.relist(ctx, t, cp, g.node)
	agents.noGrantFor(t, 3*time.Second, "after the relist, while the machine of a Node replaced under an unseen grant reboots")
	waitPoolAnnotation(t, dyn, prefix, v1alpha1.AnnotationDepartedNodes, `"grant":"`+g.grant+`"`, 30*time.Second)
}

// logLines keeps the coordinator's log lines and passes them to the test.
type logLines struct {
	t     *testing.T
	mu    sync.Mutex
	lines []string
}

func (l *logLines) Write(p []byte) (int, error) {
	l.mu.Lock()
	l.lines = append(l.lines, string(p))
	l.mu.Unlock()
	l.t.Log(strings.TrimSpace(string(p)))
	return len(p), nil
}

func (l *logLines) has(s string) bool {
	l.mu.Lock()
	defer l.mu.Unlock()
	return slices.ContainsFunc(l.lines, func(line string) bool { return strings.Contains(line, s) })
}

// frozenGrants wraps the coordinator's node index handler: it withholds
// every update that carries a grant (the cache never shows one), and every
// event of a node once frozen, until relist delivers what the watch missed
// as a relist does: one update from the copy last delivered to the Node
// the API has now.
type frozenGrants struct {
	next cache.ResourceEventHandler

	mu        sync.Mutex
	delivered map[string]*corev1.Node
	frozen    map[string]*corev1.Node // the copy last delivered, by frozen node
}

func (f *frozenGrants) wrap(next cache.ResourceEventHandler) cache.ResourceEventHandler {
	f.next, f.delivered = next, map[string]*corev1.Node{}
	return f
}

func (f *frozenGrants) freeze(node string) {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.frozen[node] = f.delivered[node]
}

func (f *frozenGrants) relist(ctx context.Context, t *testing.T, cp *cluster.ControlPlane, node string) {
	t.Helper()
	cur := getNode(ctx, t, cp, node)
	f.mu.Lock()
	old := f.frozen[node]
	delete(f.frozen, node)
	f.mu.Unlock()
	f.next.OnUpdate(old, cur)
}

// pass records obj as delivered and reports whether it is to be delivered.
func (f *frozenGrants) pass(obj any) bool {
	n, ok := obj.(*corev1.Node)
	if !ok {
		return true
	}
	f.mu.Lock()
	defer f.mu.Unlock()
	if _, frozen := f.frozen[n.Name]; frozen || n.Annotations[v1alpha1.AnnotationGrant] != "" {
		return false
	}
	f.delivered[n.Name] = n
	return true
}

func (f *frozenGrants) OnAdd(obj any, initial bool) {
	if f.pass(obj) {
		f.next.OnAdd(obj, initial)
	}
}

func (f *frozenGrants) OnUpdate(oldObj, obj any) {
	if f.pass(obj) {
		f.next.OnUpdate(oldObj, obj)
	}
}

func (f *frozenGrants) OnDelete(obj any) {
	target := obj
	if tomb, ok := obj.(cache.DeletedFinalStateUnknown); ok {
		target = tomb.Obj
	}
	if n, ok := target.(*corev1.Node); ok {
		f.mu.Lock()
		_, frozen := f.frozen[n.Name]
		f.mu.Unlock()
		if frozen {
			return
		}
	}
	f.next.OnDelete(obj)
}

// replaceNode deletes gone's Node and registers one of its name again, as
// a kubelet does after a machine's Node was deleted: not Ready (no kwok to
// report it) and without the pool's labels (an operator's, not yet set).
func replaceNode(ctx context.Context, t *testing.T, cp *cluster.ControlPlane, gone *corev1.Node) {
	t.Helper()
	if err := cp.Client().CoreV1().Nodes().Delete(ctx, gone.Name, metav1.DeleteOptions{}); err != nil {
		t.Fatalf("delete node %s: %v", gone.Name, err)
	}
	back := &corev1.Node{ObjectMeta: metav1.ObjectMeta{Name: gone.Name, Labels: map[string]string{"kubernetes.io/hostname": gone.Name}}}
	cluster.WaitFor(t, 30*time.Second, "node "+gone.Name+" registered again", func(ctx context.Context) (bool, error) {
		_, err := cp.Client().CoreV1().Nodes().Create(ctx, back, metav1.CreateOptions{})
		return err == nil, nil // the old object may still be going
	})
}

// registerAgain creates gone's Node again as its machine's kubelet does
// when the machine boots: its name, labels and capacity, Ready (kwok),
// none of the annotations anyone wrote (nodeward's report included).
func registerAgain(ctx context.Context, t *testing.T, cp *cluster.ControlPlane, gone *corev1.Node) {
	t.Helper()
	back := &corev1.Node{ObjectMeta: metav1.ObjectMeta{Name: gone.Name, Labels: gone.Labels,
		Annotations: map[string]string{cluster.KwokAnnotation: "fake"}}, Status: corev1.NodeStatus{
		Capacity: gone.Status.Capacity, Allocatable: gone.Status.Allocatable}}
	if _, err := cp.Client().CoreV1().Nodes().Create(ctx, back, metav1.CreateOptions{}); err != nil {
		t.Fatalf("register node %s again: %v", gone.Name, err)
	}
}

// deleteRebooting takes the next grant, reports its machine Rebooting and
// deletes its Node (a cloud controller, an admin), and returns the grant
// and the Node as it was.
func deleteRebooting(ctx context.Context, t *testing.T, cp *cluster.ControlPlane, agents *agents) (grantEvent, *corev1.Node) {
	t.Helper()
	g := agents.next(t, time.Minute)
	agents.mustReport(ctx, t, g, v1alpha1.StepRebooting)
	gone := getNode(ctx, t, cp, g.node)
	if err := cp.Client().CoreV1().Nodes().Delete(ctx, g.node, metav1.DeleteOptions{}); err != nil {
		t.Fatalf("delete node %s: %v", g.node, err)
	}
	return g, gone
}
