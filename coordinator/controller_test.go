package coordinator_test

import (
	"context"
	"encoding/json"
	"fmt"
	"log/slog"
	"maps"
	"math/rand/v2"
	"os"
	"slices"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/apimachinery/pkg/watch"
	"k8s.io/client-go/dynamic"
	"k8s.io/utils/ptr"

	"github.com/nodeward/nodeward/api/v1alpha1"
	"github.com/nodeward/nodeward/coordinator"
	"github.com/nodeward/nodeward/test/cluster"
	"github.com/nodeward/nodeward/test/oracle"
)

var env cluster.Env

func TestMain(m *testing.M) { os.Exit(env.Run(m)) }

// setup installs the project's CRDs and the agents' Lease namespace
// (harmless when already there).
func setup(t *testing.T) (*cluster.ControlPlane, dynamic.Interface) {
	t.Helper()
	cp := env.ControlPlane(t)
	dyn, err := dynamic.NewForConfig(cp.Config())
	if err != nil {
		t.Fatal(err)
	}
	if err := cp.InstallCRDs(context.Background()); err != nil {
		t.Fatal(err)
	}
	return cp, dyn
}

// suiteLabel keeps each test's coordinator on its own pools: the package's
// tests share one cluster, and two coordinators must never share a pool.
const suiteLabel = "nodeward.test/suite"

func createPool(t *testing.T, dyn dynamic.Interface, suite string, pool *v1alpha1.UpdatePool) {
	t.Helper()
	pool.Labels = map[string]string{suiteLabel: suite}
	if err := cluster.CreatePool(context.Background(), dyn, pool); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		_ = dyn.Resource(v1alpha1.UpdatePoolResource()).Delete(context.Background(), pool.Name, metav1.DeleteOptions{})
	})
}

// renewLeases stands in for the agents' liveness Leases.
func renewLeases(t *testing.T, cp *cluster.ControlPlane, nodes []string) {
	t.Helper()
	if err := cluster.CreateAgentLeases(context.Background(), cp.Client(), nodes); err != nil {
		t.Fatal(err)
	}
}

func patchAnnotations(ctx context.Context, cp *cluster.ControlPlane, node string, set map[string]any) error {
	patch, _ := json.Marshal(map[string]any{"metadata": map[string]any{"annotations": set}})
	_, err := cp.Client().CoreV1().Nodes().Patch(ctx, node, types.MergePatchType, patch, metav1.PatchOptions{})
	return err
}

// simulateAgents plays the agents of nodes carrying label group=prefix: a
// node handed a target reports it staged at once, a granted node reports
// Draining at once, then Done for its grant after a
// random delay, so nodes finish in random order.
func simulateAgents(ctx context.Context, t *testing.T, cp *cluster.ControlPlane, prefix string, maxDelay time.Duration) {
	w, err := cp.Client().CoreV1().Nodes().Watch(ctx, metav1.ListOptions{LabelSelector: cluster.GroupLabel + "=" + prefix})
	if err != nil {
		t.Errorf("watch nodes: %v", err)
		return
	}
	seen := map[string]bool{}
	go func() {
		defer w.Stop()
		for ev := range w.ResultChan() {
			node, ok := ev.Object.(*corev1.Node)
			if !ok || ev.Type == watch.Deleted {
				continue
			}
			// A new target is staged at once, as an agent with a fast
			// download would: only staged nodes are granted.
			if tgt := node.Annotations[v1alpha1.AnnotationTarget]; tgt != "" && node.Annotations[v1alpha1.AnnotationStaged] != tgt &&
				!seen["staged/"+node.Name+"/"+tgt] {
				seen["staged/"+node.Name+"/"+tgt] = true
				go func(name string) {
					_ = patchAnnotations(ctx, cp, name, map[string]any{v1alpha1.AnnotationState: v1alpha1.StepStaged,
						v1alpha1.AnnotationStateTarget: tgt, v1alpha1.AnnotationStaged: tgt})
				}(node.Name)
			}
			grant := node.Annotations[v1alpha1.AnnotationGrant]
			if grant == "" || seen[grant] {
				continue
			}
			seen[grant] = true
			target := node.Annotations[v1alpha1.AnnotationTarget]
			go func(name string) {
				_ = patchAnnotations(ctx, cp, name, map[string]any{v1alpha1.AnnotationState: "Draining",
					v1alpha1.AnnotationStateTarget: target, v1alpha1.AnnotationStateGrant: grant})
				select {
				case <-ctx.Done():
					return
				case <-time.After(rand.N(maxDelay)):
				}
				_ = patchAnnotations(ctx, cp, name, map[string]any{v1alpha1.AnnotationState: v1alpha1.StepDone,
					v1alpha1.AnnotationStateTarget: target, v1alpha1.AnnotationStateGrant: grant})
			}(node.Name)
		}
	}()
}

// watchInvariant asserts at every node event that at most limit nodes of the
// group are unavailable as the tests' oracle counts (oracle.Unavailable:
// updating, cordoned or not serving), and returns the maximum it saw.
func watchInvariant(ctx context.Context, t *testing.T, cp *cluster.ControlPlane, prefix string, limit int) *atomic.Int32 {
	var peak atomic.Int32
	w, err := cp.Client().CoreV1().Nodes().Watch(ctx, metav1.ListOptions{LabelSelector: cluster.GroupLabel + "=" + prefix})
	if err != nil {
		t.Fatalf("watch nodes: %v", err)
	}
	go func() {
		defer w.Stop()
		latest := map[string]*corev1.Node{}
		for ev := range w.ResultChan() {
			node, ok := ev.Object.(*corev1.Node)
			if !ok {
				continue
			}
			delete(latest, node.Name)
			if ev.Type != watch.Deleted {
				latest[node.Name] = node
			}
			down := oracle.Unavailable.Disrupted(slices.Collect(maps.Values(latest)))
			n := len(down)
			if int32(n) > peak.Load() {
				peak.Store(int32(n))
			}
			if n > limit {
				t.Errorf("invariant broken: %d nodes of %s unavailable, maxUnavailable %d: %v (last event: %s %s)",
					n, prefix, limit, down, node.Name, oracle.Unavailable.Why(node))
			}
		}
	}()
	return &peak
}

// runCoordinator runs a coordinator of suite's pools until ctx ends, its
// Config amended by each of with, and returns it.
func runCoordinator(ctx context.Context, t testing.TB, cp *cluster.ControlPlane, dyn dynamic.Interface, suite string,
	with ...func(*coordinator.Config)) *coordinator.Controller {
	opts := coordinator.Config{Client: cp.Kube(), Dynamic: dyn, Resync: time.Second,
		PoolLabelSelector: suiteLabel + "=" + suite, DisableGuard: true,
		Log: slog.New(slog.NewTextHandler(testWriter{t}, &slog.HandlerOptions{Level: slog.LevelWarn}))}
	for _, f := range with {
		f(&opts)
	}
	c := coordinator.New(opts)
	// The coordinator stops, and logs its last, before the test ends: a
	// log after it panics.
	ctx, cancel := context.WithCancel(ctx)
	done := make(chan struct{})
	go func() {
		defer close(done)
		if err := c.Run(ctx); err != nil && ctx.Err() == nil {
			t.Errorf("coordinator: %v", err)
		}
	}()
	t.Cleanup(func() { cancel(); <-done })
	return c
}

type testWriter struct{ t testing.TB }

func (w testWriter) Write(p []byte) (int, error) {
	w.t.Log(strings.TrimSpace(string(p)))
	return len(p), nil
}

// waitUpdated waits until at least want nodes of pool are updated (status is
// written at most once a second, so intermediate counts can be skipped).
func waitUpdated(t *testing.T, cp *cluster.ControlPlane, dyn dynamic.Interface, pool string, want int, timeout time.Duration) {
	t.Helper()
	cluster.WaitFor(t, timeout, fmt.Sprintf("pool %s: %d nodes updated", pool, want), func(ctx context.Context) (bool, error) {
		obj, err := dyn.Resource(v1alpha1.UpdatePoolResource()).Get(ctx, pool, metav1.GetOptions{})
		if err != nil {
			return false, err
		}
		n, _, _ := unstructured.NestedInt64(obj.Object, "status", "updatedMachineCount")
		return int(n) >= want, fmt.Errorf("updatedMachineCount %d", n)
	})
}

func TestRolloutOf50NodesNeverExceedsMaxUnavailable(t *testing.T) {
	t.Parallel()
	cp, dyn := setup(t)
	const prefix = "roll50"
	nodes := cp.CreateNodes(t, cluster.NodeSpec{Prefix: prefix, Count: 50, Zones: []string{"z1", "z2", "z3"}})
	renewLeases(t, cp, nodes)
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	peak := watchInvariant(ctx, t, cp, prefix, 10)
	simulateAgents(ctx, t, cp, prefix, 400*time.Millisecond)
	createPool(t, dyn, prefix, &v1alpha1.UpdatePool{ObjectMeta: metav1.ObjectMeta{Name: prefix}, Spec: v1alpha1.UpdatePoolSpec{
		NodeSelector: &metav1.LabelSelector{MatchLabels: map[string]string{cluster.GroupLabel: prefix}},
		OSImage:      "quay.io/fedora/fedora-coreos:43", MaxUnavailable: ptr.To(intstrPercent("20%")),
	}})
	runCoordinator(ctx, t, cp, dyn, prefix)
	waitUpdated(t, cp, dyn, prefix, 50, 3*time.Minute)
	if peak.Load() < 2 {
		t.Errorf("peak concurrency %d: the rollout never ran nodes in parallel", peak.Load())
	}
	t.Logf("peak unavailable %d of budget 10", peak.Load())
}
