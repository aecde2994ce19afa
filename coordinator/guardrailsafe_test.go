package coordinator_test

import (
	"context"
	"encoding/json"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/utils/ptr"

	"github.com/nodeward/nodeward/api/v1alpha1"
	"github.com/nodeward/nodeward/coordinator"
	"github.com/nodeward/nodeward/test/cluster"
)

// labelNode merge-patches a node's labels (nil removes), as an admin
// would.
func labelNode(ctx context.Context, t *testing.T, cp *cluster.ControlPlane, node string, set map[string]any) {
	t.Helper()
	patch, _ := json.Marshal(map[string]any{"metadata": map[string]any{"labels": set}})
	if _, err := cp.Client().CoreV1().Nodes().Patch(ctx, node, types.MergePatchType, patch, metav1.PatchOptions{}); err != nil {
		t.Fatalf("label node %s: %v", node, err)
	}
}

// TestCanarySelectorMatchingNoNodeHalts: a canary selector with a typo
// matches no node. The pool must not go on at full maxUnavailable as if it
// had no canary: it halts, naming the selector, and grants nothing; once a
// node carries the label, that node alone is granted.
func TestCanarySelectorMatchingNoNodeHalts(t *testing.T) {
	t.Parallel()
	const prefix = "canary-none"
	r := newRig(t, prefix, 4, 3)
	createPool(t, r.dyn, prefix, &v1alpha1.UpdatePool{ObjectMeta: metav1.ObjectMeta{Name: prefix}, Spec: v1alpha1.UpdatePoolSpec{
		NodeSelector: groupSelector(prefix), OSImage: "os:cn1", MaxUnavailable: ptr.To(intstrInt(3)),
		Canary: &v1alpha1.Canary{Selector: &metav1.LabelSelector{MatchLabels: map[string]string{"canray": "yes"}}, Bake: "1s"},
	}})
	runCoordinator(r.ctx, t, r.cp, r.dyn, prefix)
	msg := waitPoolConditionIs(t, r.dyn, prefix, v1alpha1.PoolHalted, "True", "NoCanaryNode", 30*time.Second)
	if !strings.Contains(msg, "canray=yes") {
		t.Errorf("Halted message %q does not name the selector", msg)
	}
	waitPoolCondition(t, r.dyn, prefix, v1alpha1.PoolUpdating, 30*time.Second, "canray=yes")
	r.agents.noGrantFor(t, 3*time.Second, "with a canary selector that matches no node")

	labelNode(r.ctx, t, r.cp, r.nodes[2], map[string]any{"canray": "yes"})
	g := r.agents.next(t, 30*time.Second)
	if g.node != r.nodes[2] {
		t.Fatalf("%s was granted, want the canary %s", g.node, r.nodes[2])
	}
	r.agents.noGrantFor(t, 2*time.Second, "while the canary updates")
	waitPoolConditionIs(t, r.dyn, prefix, v1alpha1.PoolHalted, "False", "NotHalted", 30*time.Second)
}

// TestCanaryIsANodeTheCanaryUpdated: with canary.nodes 1, a node that
// already runs the target (a new node, say) is not the canary: the pool
// still updates one node first, alone, and bakes it before going on at
// maxUnavailable.
func TestCanaryIsANodeTheCanaryUpdated(t *testing.T) {
	t.Parallel()
	const prefix, target = "canary-prior", "os:cp1"
	r := newRig(t, prefix, 3, 2)
	if err := patchAnnotations(r.ctx, r.cp, r.nodes[0], map[string]any{v1alpha1.AnnotationTarget: target,
		v1alpha1.AnnotationStaged: target, v1alpha1.AnnotationState: v1alpha1.StepDone, v1alpha1.AnnotationStateTarget: target}); err != nil {
		t.Fatal(err)
	}
	createPool(t, r.dyn, prefix, &v1alpha1.UpdatePool{ObjectMeta: metav1.ObjectMeta{Name: prefix}, Spec: v1alpha1.UpdatePoolSpec{
		NodeSelector: groupSelector(prefix), OSImage: target, MaxUnavailable: ptr.To(intstrInt(2)),
		Canary: &v1alpha1.Canary{Nodes: ptr.To(intstrInt(1)), Bake: "3s"},
	}})
	runCoordinator(r.ctx, t, r.cp, r.dyn, prefix)
	canary := r.agents.next(t, time.Minute)
	if canary.node == r.nodes[0] {
		t.Fatalf("%s, which ran the target already, was granted", canary.node)
	}
	r.agents.noGrantFor(t, 3*time.Second, "while the canary updates, although a node ran the target before")
	r.agents.mustReport(r.ctx, t, canary, v1alpha1.StepDone)
	waitAnnotationSet(t, r.cp, canary.node, v1alpha1.AnnotationSoakUntil, 30*time.Second)
	bakeStart := time.Now()
	next := r.agents.next(t, time.Minute)
	if since := time.Since(bakeStart); since < 2*time.Second {
		t.Errorf("%s was granted %s after the canary reported Done, before its 3 s bake", next.node, since)
	}
	r.agents.mustReport(r.ctx, t, next, v1alpha1.StepDone)
	waitUpdated(t, r.cp, r.dyn, prefix, 3, 30*time.Second)
}

// TestCanaryThatDoesNotServeAtTheEndOfItsBakeHolds: the canary reports
// Done but loses its network during its bake. When the bake ends it has
// not passed: it keeps its slot and nothing else is granted until it
// serves again; then the pool goes on at maxUnavailable.
func TestCanaryThatDoesNotServeAtTheEndOfItsBakeHolds(t *testing.T) {
	t.Parallel()
	const prefix = "canary-down"
	r := newRig(t, prefix, 4, 3)
	createPool(t, r.dyn, prefix, &v1alpha1.UpdatePool{ObjectMeta: metav1.ObjectMeta{Name: prefix}, Spec: v1alpha1.UpdatePoolSpec{
		NodeSelector: groupSelector(prefix), OSImage: "os:cd1", MaxUnavailable: ptr.To(intstrInt(3)),
		Canary: &v1alpha1.Canary{Nodes: ptr.To(intstrInt(1)), Bake: "2s"},
	}})
	runCoordinator(r.ctx, t, r.cp, r.dyn, prefix)
	canary := r.agents.next(t, time.Minute)
	r.agents.mustReport(r.ctx, t, canary, v1alpha1.StepDone)
	waitAnnotationSet(t, r.cp, canary.node, v1alpha1.AnnotationSoakUntil, 30*time.Second)
	setCondition(r.ctx, t, r.cp, canary.node, corev1.NodeNetworkUnavailable, corev1.ConditionTrue)
	r.agents.noGrantFor(t, 5*time.Second, "after the bake of a canary that does not serve")
	waitPoolCondition(t, r.dyn, prefix, v1alpha1.PoolUpdating, 30*time.Second, canary.node+" (soak over, kept until it serves again")
	if g := getNode(r.ctx, t, r.cp, canary.node).Annotations[v1alpha1.AnnotationGrant]; g != canary.grant {
		t.Errorf("the canary that does not serve lost its grant after its bake: grant %q, want %q", g, canary.grant)
	}

	setCondition(r.ctx, t, r.cp, canary.node, corev1.NodeNetworkUnavailable, corev1.ConditionFalse)
	rest := []grantEvent{r.agents.next(t, 30*time.Second)}
	for len(rest) < 3 {
		rest = append(rest, r.agents.next(t, 10*time.Second))
	}
	for _, g := range rest {
		r.agents.mustReport(r.ctx, t, g, v1alpha1.StepDone)
	}
	waitUpdated(t, r.cp, r.dyn, prefix, 4, 30*time.Second)
}

// TestHaltTheCacheHasNotSeenHoldsTheNextGrant: a gate that fails while a
// node soaks halts the pool (persistHalt writes the annotation), and the
// next pass may read the pool from a cache that has not seen the halt yet,
// with the gate passing again. Here the halt is written on the API server
// exactly between the cache read and the planning of the pass in which the
// node's soak is over, so that pass plans from a pool without it: it must
// still not release the soaking node as over and grant the next.
func TestHaltTheCacheHasNotSeenHoldsTheNextGrant(t *testing.T) {
	t.Parallel()
	const prefix = "halt-stale"
	r := newRig(t, prefix, 3, 1)
	var mu sync.Mutex
	var soakUntil time.Time // of the first node, once the test read it
	var halted atomic.Bool
	opts := coordinator.Config{Client: r.cp.Kube(), Dynamic: r.dyn, Resync: time.Second,
		PoolLabelSelector: suiteLabel + "=" + prefix, DisableGuard: true,
		Log: slog.New(slog.NewTextHandler(testWriter{t}, &slog.HandlerOptions{Level: slog.LevelWarn}))}
	coordinator.SetTestHooks(&opts, func(pool *v1alpha1.UpdatePool, now time.Time) {
		mu.Lock()
		over := !soakUntil.IsZero() && !now.Before(soakUntil)
		mu.Unlock()
		if pool.Name != prefix || !over || pool.Annotations[v1alpha1.AnnotationHalted] != "" || halted.Load() {
			return
		}
		// What the last pass's persistHalt wrote, as the cache has not
		// delivered it yet.
		patchPoolAnnotations(r.ctx, t, r.dyn, prefix, map[string]any{
			v1alpha1.AnnotationHalted: coordinator.HaltedByGate(pool, "gate failed while a node soaked: AlertFiring: test")})
		halted.Store(true)
	}, nil)
	c := coordinator.New(opts)
	go func() { _ = c.Run(r.ctx) }()
	createPool(t, r.dyn, prefix, &v1alpha1.UpdatePool{ObjectMeta: metav1.ObjectMeta{Name: prefix}, Spec: v1alpha1.UpdatePoolSpec{
		NodeSelector: groupSelector(prefix), OSImage: "os:hs1", MaxUnavailable: ptr.To(intstrInt(1)), Soak: "2s",
	}})
	first := r.agents.next(t, time.Minute)
	r.agents.mustReport(r.ctx, t, first, v1alpha1.StepDone)
	waitAnnotationSet(t, r.cp, first.node, v1alpha1.AnnotationSoakUntil, 30*time.Second)
	until, err := time.Parse(time.RFC3339, getNode(r.ctx, t, r.cp, first.node).Annotations[v1alpha1.AnnotationSoakUntil])
	if err != nil {
		t.Fatal(err)
	}
	mu.Lock()
	soakUntil = until
	mu.Unlock()

	r.agents.noGrantFor(t, time.Until(until)+4*time.Second, "after the soak, by a pass that read the pool before its halt")
	if !halted.Load() {
		t.Fatal("no pass planned the end of the soak from a pool without its halt; the test did not exercise a stale cache")
	}
	waitPoolConditionIs(t, r.dyn, prefix, v1alpha1.PoolHalted, "True", "GateFailedWhileSoaking", 30*time.Second)
	noGrantBut(r.ctx, t, r.cp, r.nodes, "", "while the pool is halted")
}

// TestGatesVerdictIsPlannedOnWhatHoldsAfterTheEvaluation: evaluating the
// gates is slow (a Prometheus query), and the pool changes meanwhile: a
// cordoned node is relabelled into it while Prometheus answers. The grants
// that follow the verdict must count that node: with maxUnavailable 2,
// one node is granted, not two.
func TestGatesVerdictIsPlannedOnWhatHoldsAfterTheEvaluation(t *testing.T) {
	t.Parallel()
	const prefix, target = "gate-slow", "os:gw1"
	r := newRig(t, prefix, 2, 2)
	for _, n := range r.nodes { // staged already: the first pass that plans a grant asks the gates
		if err := patchAnnotations(r.ctx, r.cp, n, map[string]any{v1alpha1.AnnotationTarget: target,
			v1alpha1.AnnotationStaged: target, v1alpha1.AnnotationState: v1alpha1.StepStaged, v1alpha1.AnnotationStateTarget: target}); err != nil {
			t.Fatal(err)
		}
	}
	late := r.cp.CreateNodes(t, cluster.NodeSpec{Prefix: prefix + "-late", Count: 1})[0]
	renewLeases(t, r.cp, []string{late})
	cordon(r.ctx, t, r.cp, late, true)
	var first sync.Once
	prom := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, _ *http.Request) {
		first.Do(func() {
			labelNode(r.ctx, t, r.cp, late, map[string]any{cluster.GroupLabel: prefix})
			time.Sleep(1500 * time.Millisecond) // the node event reaches the coordinator's caches meanwhile
		})
		w.Header().Set("Content-Type", "application/json")
		_, _ = w.Write([]byte(`{"status":"success","data":{"alerts":[]}}`))
	}))
	t.Cleanup(prom.Close)
	createPool(t, r.dyn, prefix, &v1alpha1.UpdatePool{ObjectMeta: metav1.ObjectMeta{Name: prefix}, Spec: v1alpha1.UpdatePoolSpec{
		NodeSelector: groupSelector(prefix), OSImage: target, MaxUnavailable: ptr.To(intstrInt(2)),
		Gates: &v1alpha1.Gates{Prometheus: prom.URL, Alerts: &metav1.LabelSelector{}},
	}})
	runCoordinator(r.ctx, t, r.cp, r.dyn, prefix)
	g := r.agents.next(t, time.Minute)
	r.agents.noGrantFor(t, 3*time.Second, "with "+g.node+" updating and "+late+" cordoned in a pool of maxUnavailable 2")
	waitPoolCondition(t, r.dyn, prefix, v1alpha1.PoolUpdating, 30*time.Second, late+" (cordoned")
	cordon(r.ctx, t, r.cp, late, false)
	r.agents.next(t, 30*time.Second)
}

// TestSoakingControlPlaneNodeKeepsTheClusterWideSlot: a control-plane node
// that reported Done and soaks keeps its pool's slot, and the cluster-wide
// one too: another pool's control-plane node is granted only once the
// soak is over and the first node released.
//
// Not parallel: the cap is cluster-wide (TestControlPlaneNodesAreCappedClusterWide).
func TestSoakingControlPlaneNodeKeepsTheClusterWideSlot(t *testing.T) {
	cp, dyn := setup(t)
	const suite, first, second = "cpsoak", "cpsoak-a", "cpsoak-b"
	a := cp.CreateNodes(t, cluster.NodeSpec{Prefix: first, Count: 1, Role: "control-plane"})
	b := cp.CreateNodes(t, cluster.NodeSpec{Prefix: second, Count: 1, Role: "control-plane"})
	renewLeases(t, cp, append(append([]string{}, a...), b...))
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	agents := scriptAgents(ctx, t, cp, cluster.GroupLabel+" in (cpsoak-a,cpsoak-b)")
	runCoordinator(ctx, t, cp, dyn, suite)
	createPool(t, dyn, suite, &v1alpha1.UpdatePool{ObjectMeta: metav1.ObjectMeta{Name: first}, Spec: v1alpha1.UpdatePoolSpec{
		NodeSelector: groupSelector(first), OSImage: "os:cs1", Soak: "5s",
	}})
	g := agents.next(t, time.Minute)
	agents.mustReport(ctx, t, g, v1alpha1.StepDone)
	waitAnnotationSet(t, cp, g.node, v1alpha1.AnnotationSoakUntil, 30*time.Second)
	createPool(t, dyn, suite, &v1alpha1.UpdatePool{ObjectMeta: metav1.ObjectMeta{Name: second}, Spec: v1alpha1.UpdatePoolSpec{
		NodeSelector: groupSelector(second), OSImage: "os:cs1",
	}})
	waitPoolCondition(t, dyn, second, v1alpha1.PoolUpdating, 30*time.Second,
		"control-plane node "+g.node+" (soaking after its update until", "one control-plane node at a time, cluster-wide")
	noGrantBut(ctx, t, cp, b, "", "while another control-plane node soaks")
	if got := getNode(ctx, t, cp, g.node).Annotations[v1alpha1.AnnotationGrant]; got != g.grant {
		t.Fatalf("the soaking node %s lost its grant (%q) before the check: the test checked nothing", g.node, got)
	}

	next := agents.next(t, 30*time.Second)
	if next.node != b[0] {
		t.Fatalf("%s granted, want %s", next.node, b[0])
	}
	if got := getNode(ctx, t, cp, g.node).Annotations[v1alpha1.AnnotationGrant]; got != "" {
		t.Errorf("%s granted while %s still keeps its slot (%s)", next.node, g.node, got)
	}
	agents.mustReport(ctx, t, next, v1alpha1.StepDone)
	waitUpdated(t, cp, dyn, second, 1, 30*time.Second)
}
