package coordinator_test

import (
	"context"
	"slices"
	"sync"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/client-go/dynamic"
	"k8s.io/client-go/tools/cache"
	"k8s.io/utils/ptr"

	"github.com/nodeward/nodeward/api/v1alpha1"
	"github.com/nodeward/nodeward/coordinator"
	"github.com/nodeward/nodeward/test/cluster"
)

// The grant records and the pool's finalizer on the real API server: what
// a new leader counts of a machine the old one never recorded, and a pool
// deleted while its machine is down.

// TestDepartureTheLeaderNeverSawKeepsCounting: a Node deleted under a
// grant while the leader's cache has not delivered the delete, then the
// leader gone (a crash, a pause past its Lease) before any pass recorded
// the departure. The new leader's list has neither the Node nor a
// departure; it counts the machine from the pool's record of the grant
// (AnnotationGrantedNodes, written before the grant), so with
// maxUnavailable 1 nothing else is granted until the machine is back
// (protocol simulator seeds 1000191, 1000652, 8000778).
func TestDepartureTheLeaderNeverSawKeepsCounting(t *testing.T) {
	t.Parallel()
	const prefix = "unrecorded"
	r := newRig(t, prefix, 3, 1)
	cp, dyn, ctx, agents := r.cp, r.dyn, r.ctx, r.agents
	createPool(t, dyn, prefix, &v1alpha1.UpdatePool{ObjectMeta: metav1.ObjectMeta{Name: prefix}, Spec: v1alpha1.UpdatePoolSpec{
		NodeSelector: groupSelector(prefix), OSImage: "os:unrecorded1", MaxUnavailable: ptr.To(intstrInt(1)),
	}})
	deaf := &deafToDeletes{}
	first, stopFirst := context.WithCancel(ctx)
	runCoordinator(first, t, cp, dyn, prefix, func(o *coordinator.Config) { coordinator.SetNodeEventsHook(o, deaf.wrap) })

	g, gone := deleteRebooting(ctx, t, cp, agents)
	waitPoolAnnotation(t, dyn, prefix, v1alpha1.AnnotationGrantedNodes, `"grant":"`+g.grant+`"`, time.Second)
	cluster.WaitFor(t, 30*time.Second, "the delete of "+g.node+" withheld from the first leader", func(context.Context) (bool, error) {
		return deaf.withheld(g.node), nil
	})
	stopFirst()

	runCoordinator(ctx, t, cp, dyn, prefix)
	waitPoolAnnotation(t, dyn, prefix, v1alpha1.AnnotationDepartedNodes, `"grant":"`+g.grant+`"`, 30*time.Second)
	agents.noGrantFor(t, 3*time.Second, "by a new leader while the machine of a Node the old leader never saw deleted reboots")

	registerAgain(ctx, t, cp, gone)
	agents.mustReport(ctx, t, g, v1alpha1.StepDone)
	if next := agents.next(t, time.Minute); next.grant == g.grant {
		t.Fatalf("the departed grant %s came back", g.grant)
	}
	waitPoolAnnotation(t, dyn, prefix, v1alpha1.AnnotationDepartedNodes, "", 30*time.Second)
}

// deafToDeletes wraps the coordinator's node index handler: it withholds
// every delete, as a cache whose watch has not delivered them yet.
type deafToDeletes struct {
	next cache.ResourceEventHandler

	mu    sync.Mutex
	nodes map[string]bool
}

func (d *deafToDeletes) wrap(next cache.ResourceEventHandler) cache.ResourceEventHandler {
	d.next, d.nodes = next, map[string]bool{}
	return d
}

func (d *deafToDeletes) withheld(node string) bool {
	d.mu.Lock()
	defer d.mu.Unlock()
	return d.nodes[node]
}

func (d *deafToDeletes) OnAdd(obj any, initial bool) { d.next.OnAdd(obj, initial) }

func (d *deafToDeletes) OnUpdate(oldObj, obj any) { d.next.OnUpdate(oldObj, obj) }

func (d *deafToDeletes) OnDelete(obj any) {
	target := obj
	if tomb, ok := obj.(cache.DeletedFinalStateUnknown); ok {
		target = tomb.Obj
	}
	if n, ok := target.(*corev1.Node); ok {
		d.mu.Lock()
		d.nodes[n.Name] = true
		d.mu.Unlock()
	}
}

// TestPoolDeletedWhileItsMachineIsDownStays: a pool that recorded a grant
// holds the finalizer update.nodeward.io/grants. Deleted while the
// machine of that grant is down, its Node deleted, the pool stays (marked
// for deletion, granting nothing, its departed nodes kept for a new
// leader), so it cannot be created again empty and grant past the machine
// (protocol simulator seeds 9101640, 9102110). Once the machine is back and
// its agent reports, the records settle, the finalizer goes and so does
// the pool.
func TestPoolDeletedWhileItsMachineIsDownStays(t *testing.T) {
	t.Parallel()
	const prefix = "finalized"
	r := newRig(t, prefix, 3, 1)
	cp, dyn, ctx, agents := r.cp, r.dyn, r.ctx, r.agents
	spec := v1alpha1.UpdatePoolSpec{NodeSelector: groupSelector(prefix), OSImage: "os:finalized1", MaxUnavailable: ptr.To(intstrInt(1))}
	createPool(t, dyn, prefix, &v1alpha1.UpdatePool{ObjectMeta: metav1.ObjectMeta{Name: prefix}, Spec: spec})
	first, stopFirst := context.WithCancel(ctx)
	runCoordinator(first, t, cp, dyn, prefix)

	g, gone := deleteRebooting(ctx, t, cp, agents)
	if p := getPool(ctx, t, dyn, prefix); !slices.Contains(p.GetFinalizers(), v1alpha1.FinalizerGrants) {
		t.Fatalf("pool %s recorded grant %s without the finalizer %s: %v", prefix, g.grant, v1alpha1.FinalizerGrants, p.GetFinalizers())
	}
	waitPoolAnnotation(t, dyn, prefix, v1alpha1.AnnotationDepartedNodes, `"grant":"`+g.grant+`"`, 30*time.Second)
	if err := dyn.Resource(v1alpha1.UpdatePoolResource()).Delete(ctx, prefix, metav1.DeleteOptions{}); err != nil {
		t.Fatalf("delete pool %s: %v", prefix, err)
	}
	// A new leader, and the pool created again by an operator: refused
	// while the old one waits for its machine.
	stopFirst()
	runCoordinator(ctx, t, cp, dyn, prefix)
	if p := getPool(ctx, t, dyn, prefix); p.GetDeletionTimestamp() == nil {
		t.Fatalf("pool %s not marked for deletion", prefix)
	}
	again := &v1alpha1.UpdatePool{ObjectMeta: metav1.ObjectMeta{Name: prefix, Labels: map[string]string{suiteLabel: prefix}}, Spec: spec}
	if err := cluster.CreatePool(ctx, dyn, again); !apierrors.IsAlreadyExists(err) {
		t.Fatalf("pool %s created again while the old one waits for its machine: %v", prefix, err)
	}
	agents.noGrantFor(t, 3*time.Second, "by a pool being deleted, its machine down")

	registerAgain(ctx, t, cp, gone)
	agents.mustReport(ctx, t, g, v1alpha1.StepDone)
	cluster.WaitFor(t, 30*time.Second, "pool "+prefix+" gone once its records settle", func(ctx context.Context) (bool, error) {
		_, err := dyn.Resource(v1alpha1.UpdatePoolResource()).Get(ctx, prefix, metav1.GetOptions{})
		return apierrors.IsNotFound(err), nil
	})
	if err := cluster.CreatePool(ctx, dyn, again); err != nil {
		t.Fatalf("create pool %s again: %v", prefix, err)
	}
	if next := agents.next(t, time.Minute); next.grant == g.grant {
		t.Fatalf("the departed grant %s came back", g.grant)
	}
}

func getPool(ctx context.Context, t *testing.T, dyn dynamic.Interface, name string) *unstructured.Unstructured {
	t.Helper()
	p, err := dyn.Resource(v1alpha1.UpdatePoolResource()).Get(ctx, name, metav1.GetOptions{})
	if err != nil {
		t.Fatalf("read pool %s: %v", name, err)
	}
	return p
}
