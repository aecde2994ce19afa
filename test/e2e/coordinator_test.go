package e2e

import (
	"bytes"
	"context"
	"log/slog"
	"strings"
	"sync"
	"testing"
	"time"

	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/intstr"
	"k8s.io/client-go/dynamic"
	"k8s.io/utils/ptr"

	v1alpha1 "github.com/nodeward/nodeward/api/v1alpha1"
	"github.com/nodeward/nodeward/test/cluster"
	"github.com/nodeward/nodeward/test/coordinatortest"
	"github.com/nodeward/nodeward/test/sim"
)

// installPoolAPI installs the project's CRDs and the agents' Lease
// namespace (what exists already is kept) and returns a dynamic client for
// the pools.
func installPoolAPI(t *testing.T, cp *cluster.ControlPlane) dynamic.Interface {
	t.Helper()
	if err := cp.InstallCRDs(context.Background()); err != nil {
		t.Fatal(err)
	}
	dyn, err := dynamic.NewForConfig(cp.Config())
	if err != nil {
		t.Fatal(err)
	}
	return dyn
}

// createPool creates the UpdatePool of this pool's nodes (group label =
// prefix) with spec, labelled for the coordinator started with Pools =
// prefix only (coordinatortest.PoolLabels), and deletes it when the test
// ends.
func (p *pool) createPool(dyn dynamic.Interface, spec v1alpha1.UpdatePoolSpec) {
	p.t.Helper()
	spec.NodeSelector = &metav1.LabelSelector{MatchLabels: map[string]string{cluster.GroupLabel: p.prefix}}
	pool := &v1alpha1.UpdatePool{
		ObjectMeta: metav1.ObjectMeta{Name: p.prefix, Labels: coordinatortest.PoolLabels(p.prefix)},
		Spec:       spec,
	}
	if err := cluster.CreatePool(context.Background(), dyn, pool); err != nil {
		p.t.Fatal(err)
	}
	p.t.Cleanup(func() {
		_ = dyn.Resource(v1alpha1.UpdatePoolResource()).Delete(context.Background(), p.prefix, metav1.DeleteOptions{})
	})
}

// TestRolloutWithCoordinator: ten agents and nodeward's own coordinator, an
// UpdatePool with maxUnavailable 3, the coordinator killed and restarted
// mid-rollout. Every node ends updated once and the invariant holds at
// every node event.
func TestRolloutWithCoordinator(t *testing.T) {
	t.Parallel()
	p := newPool(t, "coord", poolOptions{count: 10, maxUnavailable: 3, spec: cluster.NodeSpec{Zones: []string{"a", "b"}}})
	dyn := installPoolAPI(t, p.cp)
	if err := cluster.CreateAgentLeases(context.Background(), p.cp.Client(), p.names); err != nil {
		t.Fatal(err)
	}
	ns := p.cp.Namespace(t)
	p.workload(ns, "web", 10)
	p.createPool(dyn, v1alpha1.UpdatePoolSpec{OSImage: toOS, MaxUnavailable: ptr.To(intstr.FromInt32(3))})
	p.startAgents()
	var logs lockedBuffer
	// Each run is the coordinator of this test's pool only; other tests
	// run their own on theirs.
	coordinatorOptions := coordinatortest.Options{Pools: "coord", Resync: time.Second, Log: slog.New(slog.NewTextHandler(&logs, &slog.HandlerOptions{Level: slog.LevelDebug}))}
	stop := coordinatortest.Start(t, p.cp, coordinatorOptions)
	p.reportOnFailure(&logs)
	// Kill the coordinator once the first nodes are done, restart it.
	cluster.WaitFor(t, 3*time.Minute, "two nodes Done", func(ctx context.Context) (bool, error) {
		return p.countStep(ctx, v1alpha1.StepDone) >= 2, nil
	})
	stop()
	coordinatortest.Start(t, p.cp, coordinatorOptions)
	p.reportOnFailure(&logs)
	p.waitAllDone(3 * time.Minute)
	for _, name := range p.names {
		p.assertUpdated(name)
	}
	// Every slot is given back once its node is Done: by the agent itself,
	// in its report of Done (release-at-done), so the coordinator writes
	// no release of a Done grant (#21).
	cluster.WaitFor(t, 30*time.Second, "every grant released", func(ctx context.Context) (bool, error) {
		for _, name := range p.names {
			n, err := p.node(ctx, name)
			if err != nil {
				return false, err
			}
			if _, granted := n.Annotations[v1alpha1.AnnotationGrant]; granted {
				return false, nil
			}
		}
		return true, nil
	})
	if n := strings.Count(logs.String(), `msg="slot released"`); n != strings.Count(logs.String(), "yielded=true") {
		t.Errorf("the coordinator released %d grants itself, not all of them yields; the agents release their Done grants:\n%s", n, logs.String())
	}
	p.mu.Lock()
	defer p.mu.Unlock()
	t.Logf("maximum unavailable observed: %d", p.maxSeen)
}

// lockedBuffer is a bytes.Buffer a coordinator's logger and the test share.
type lockedBuffer struct {
	mu  sync.Mutex
	buf bytes.Buffer
}

func (b *lockedBuffer) Write(p []byte) (int, error) {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.buf.Write(p)
}

func (b *lockedBuffer) String() string {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.buf.String()
}

func (p *pool) countStep(ctx context.Context, step v1alpha1.Step) int {
	count := 0
	for _, name := range p.names {
		if n, err := p.node(ctx, name); err == nil && n.Annotations[v1alpha1.AnnotationState] == string(step) {
			count++
		}
	}
	return count
}

// TestStagingBudgetWithCoordinator: five nodes whose download takes 2 s,
// maxStaging 2: the coordinator hands the target out two nodes at a time,
// so no event ever shows more than two nodes staging, and the rollout
// completes.
func TestStagingBudgetWithCoordinator(t *testing.T) {
	t.Parallel()
	p := newPool(t, "stagebudget", poolOptions{count: 5, maxUnavailable: 1,
		tune: func(n *sim.SimNode) { n.Host.StageDelay = 2 * time.Second }})
	dyn := installPoolAPI(t, p.cp)
	if err := cluster.CreateAgentLeases(context.Background(), p.cp.Client(), p.names); err != nil {
		t.Fatal(err)
	}
	p.createPool(dyn, v1alpha1.UpdatePoolSpec{OSImage: toOS, MaxUnavailable: ptr.To(intstr.FromInt32(1)),
		MaxStaging: ptr.To[int32](2)})
	p.startAgents()
	coordinatortest.Start(t, p.cp, coordinatortest.Options{Pools: "stagebudget", Resync: time.Second})
	p.waitAllDone(3 * time.Minute)
	for _, name := range p.names {
		p.assertUpdated(name)
	}
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.maxStaging > 2 || p.maxStaging == 0 {
		t.Fatalf("%d nodes staging at once; want 1 or 2 (maxStaging 2)", p.maxStaging)
	}
	t.Logf("most nodes staging at once: %d", p.maxStaging)
}

// TestForceOnDrainTimeoutWithCoordinator: a pool with drain
// {timeout: 5s, onTimeout: Force}; a PDB allowing no disruption holds the
// drain of one node. Past the timeout the agent deletes the blocking pod
// without the Eviction API (an Event on the Node says so), reboots and ends
// Done; the pod is recreated elsewhere.
func TestForceOnDrainTimeoutWithCoordinator(t *testing.T) {
	t.Parallel()
	p := newPool(t, "force", poolOptions{count: 1, maxUnavailable: 1})
	name := p.names[0]
	ns := p.cp.Namespace(t)
	blockDrain(p, name, ns) // never released: only force gets past it
	dyn := installPoolAPI(t, p.cp)
	if err := cluster.CreateAgentLeases(context.Background(), p.cp.Client(), p.names); err != nil {
		t.Fatal(err)
	}
	p.createPool(dyn, v1alpha1.UpdatePoolSpec{OSImage: toOS, MaxUnavailable: ptr.To(intstr.FromInt32(1)),
		Drain: &v1alpha1.DrainSpec{Timeout: "5s", OnTimeout: "Force"}})
	before, err := p.cp.Client().CoreV1().Pods(ns).List(context.Background(), metav1.ListOptions{LabelSelector: "app=pinned"})
	if err != nil || len(before.Items) != 1 {
		t.Fatalf("pinned pods before the update: %v, %v", before, err)
	}
	p.startAgents()
	coordinatortest.Start(t, p.cp, coordinatortest.Options{Pools: "force", Resync: time.Second})
	p.waitStep(name, v1alpha1.StepDone, 2*time.Minute)
	p.assertUpdated(name)
	cluster.WaitFor(t, 30*time.Second, "a DrainForced Event on "+name, func(ctx context.Context) (bool, error) {
		evs, err := p.cp.Client().CoreV1().Events(metav1.NamespaceAll).List(ctx, metav1.ListOptions{
			FieldSelector: "involvedObject.name=" + name + ",reason=DrainForced"})
		return err == nil && len(evs.Items) > 0, err
	})
	cluster.WaitFor(t, 30*time.Second, "the blocking pod to be gone", func(ctx context.Context) (bool, error) {
		pod, err := p.cp.Client().CoreV1().Pods(ns).Get(ctx, before.Items[0].Name, metav1.GetOptions{})
		return apierrors.IsNotFound(err) || (err == nil && pod.UID != before.Items[0].UID), nil
	})
}
