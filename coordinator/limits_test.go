package coordinator_test

import (
	"context"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/utils/ptr"

	"github.com/nodeward/nodeward/api/v1alpha1"
	"github.com/nodeward/nodeward/coordinator"
	"github.com/nodeward/nodeward/test/cluster"
)

// TestControlPlaneNodesAreCappedClusterWide: a worker pool that selects a
// control-plane node does not grant it while a node of the control-plane
// pool (labelled with the older "master" role) is updating; its workers go
// on. A pool with maxUnavailable "0%" grants nothing and says why.
//
// Not parallel: the cap is cluster-wide, so the control-plane nodes of the
// parallel tests would count.
func TestControlPlaneNodesAreCappedClusterWide(t *testing.T) {
	cp, dyn := setup(t)
	const suite = "cpcap"
	workers := cp.CreateNodes(t, cluster.NodeSpec{Prefix: "cpcap-w", Count: 1})
	workerCP := cp.CreateNodes(t, cluster.NodeSpec{Prefix: "cpcap-wcp", Count: 1, Role: "control-plane"})
	masters := cp.CreateNodes(t, cluster.NodeSpec{Prefix: "cpcap-m", Count: 2, Role: "master"})
	zero := cp.CreateNodes(t, cluster.NodeSpec{Prefix: "cpcap-zero", Count: 1})
	all := append(append(append(append([]string{}, workers...), workerCP...), masters...), zero...)
	renewLeases(t, cp, all)
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	watchUnavailable(ctx, t, cp, cluster.GroupLabel+" in (cpcap-wcp,cpcap-m)", 1)
	agents := scriptAgents(ctx, t, cp, cluster.GroupLabel+" in (cpcap-w,cpcap-wcp,cpcap-m,cpcap-zero)")
	runCoordinator(ctx, t, cp, dyn, suite)
	createPool(t, dyn, suite, &v1alpha1.UpdatePool{ObjectMeta: metav1.ObjectMeta{Name: "cpcap-masters"}, Spec: v1alpha1.UpdatePoolSpec{
		NodeSelector: groupSelector("cpcap-m"), OSImage: "os:cc1", ControlPlane: true,
	}})
	g := agents.next(t, time.Minute)
	createPool(t, dyn, suite, &v1alpha1.UpdatePool{ObjectMeta: metav1.ObjectMeta{Name: "cpcap-workers"}, Spec: v1alpha1.UpdatePoolSpec{
		NodeSelector: &metav1.LabelSelector{MatchExpressions: []metav1.LabelSelectorRequirement{{
			Key: cluster.GroupLabel, Operator: metav1.LabelSelectorOpIn, Values: []string{"cpcap-w", "cpcap-wcp"}}}},
		OSImage: "os:cc1", MaxUnavailable: ptr.To(intstrPercent("100%")),
	}})
	createPool(t, dyn, suite, &v1alpha1.UpdatePool{ObjectMeta: metav1.ObjectMeta{Name: "cpcap-zero"}, Spec: v1alpha1.UpdatePoolSpec{
		NodeSelector: groupSelector("cpcap-zero"), OSImage: "os:cc1", MaxUnavailable: ptr.To(intstrPercent("0%")),
	}})
	// The worker is granted; the worker pool's control-plane node waits.
	w := agents.next(t, 30*time.Second)
	if w.node != workers[0] {
		t.Fatalf("while %s (control plane) updates, %s was granted", g.node, w.node)
	}
	waitPoolCondition(t, dyn, "cpcap-workers", v1alpha1.PoolUpdating, 30*time.Second,
		"control-plane node "+g.node+" (updating", "one control-plane node at a time, cluster-wide")
	noGrantBut(ctx, t, cp, workerCP, "", "while another control-plane node updates")
	waitPoolCondition(t, dyn, "cpcap-zero", v1alpha1.PoolUpdating, 30*time.Second, `maxUnavailable 0% resolves to 0: no node is granted`)
	noGrantBut(ctx, t, cp, zero, "", "in a pool with maxUnavailable 0%")

	// One control-plane node at a time, whichever pool grants it.
	agents.mustReport(ctx, t, w, v1alpha1.StepDone)
	agents.mustReport(ctx, t, g, v1alpha1.StepDone)
	for range 2 {
		next := agents.next(t, 30*time.Second)
		if next.node == g.node || next.node == workers[0] || next.node == zero[0] {
			t.Fatalf("unexpected grant to %s", next.node)
		}
		agents.mustReport(ctx, t, next, v1alpha1.StepDone)
	}
	waitUpdated(t, cp, dyn, "cpcap-masters", 2, 30*time.Second)
	waitUpdated(t, cp, dyn, "cpcap-workers", 2, 30*time.Second)
}

// TestReadyzAndHealthzFollowLeadershipAndLoops: a replica is not ready
// before it runs, ready as a standby and as a leader with synced caches,
// not ready once stopped; it is not live when its resync loop stops making
// progress.
func TestReadyzAndHealthzFollowLeadershipAndLoops(t *testing.T) {
	t.Parallel()
	cp, dyn := setup(t)
	ns := cp.Namespace(t)
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	var offsetA atomic.Int64
	healthA := coordinator.NewProgress(func() time.Time { return time.Now().Add(time.Duration(offsetA.Load())) })
	healthB := coordinator.NewProgress(nil)
	code := func(serve http.HandlerFunc) int {
		rec := httptest.NewRecorder()
		serve(rec, httptest.NewRequest(http.MethodGet, "/", nil))
		return rec.Code
	}
	if code(healthA.ServeReadyz) != http.StatusServiceUnavailable {
		t.Errorf("/readyz before the coordinator runs: %d, want 503", code(healthA.ServeReadyz))
	}
	start := func(id string, h *coordinator.Progress) context.CancelFunc {
		cctx, stop := context.WithCancel(ctx)
		// A resync of an hour: the test moves the clock, not the ticker.
		opts := coordinator.Config{Client: cp.Kube(), Dynamic: dyn, Resync: time.Hour, Progress: h, DisableGuard: true,
			PoolLabelSelector: suiteLabel + "=health", Log: slog.New(slog.NewTextHandler(testWriter{t}, &slog.HandlerOptions{Level: slog.LevelWarn}))}
		go func() { _ = coordinator.RunWithLeaderElection(cctx, opts, leaderOptions(ns, id)) }()
		return stop
	}
	holder := func(ctx context.Context) string {
		l, err := cp.Client().CoordinationV1().Leases(ns).Get(ctx, coordinator.LeaderLeaseName, metav1.GetOptions{})
		if err != nil || l.Spec.HolderIdentity == nil {
			return ""
		}
		return *l.Spec.HolderIdentity
	}
	stopA := start("a", healthA)
	cluster.WaitFor(t, 30*time.Second, "a to lead with synced caches", func(ctx context.Context) (bool, error) {
		return holder(ctx) == "a" && healthA.Role() == "leader" && code(healthA.ServeReadyz) == http.StatusOK, healthA.Ready()
	})
	stopB := start("b", healthB)
	defer stopB()
	cluster.WaitFor(t, 30*time.Second, "b ready as a standby", func(context.Context) (bool, error) {
		return healthB.Role() == "standby" && healthB.Ready() == nil, healthB.Ready()
	})
	for id, h := range map[string]*coordinator.Progress{"a": healthA, "b": healthB} {
		if err := h.Live(); err != nil || code(h.ServeHealthz) != http.StatusOK {
			t.Errorf("replica %s not live: %v", id, err)
		}
	}
	// Four hours without a resync (due hourly) on a's clock: not live.
	offsetA.Store(int64(4 * time.Hour))
	if err := healthA.Live(); err == nil || !strings.Contains(err.Error(), "no resync") || code(healthA.ServeHealthz) != http.StatusServiceUnavailable {
		t.Errorf("leader without a resync for 4 hours: Live() = %v", err)
	}
	offsetA.Store(0)
	if err := healthA.Live(); err != nil {
		t.Errorf("clock back: Live() = %v", err)
	}
	// Stopped: a is neither ready nor live; b takes over and is ready.
	stopA()
	cluster.WaitFor(t, 30*time.Second, "a stopped: /readyz 503", func(context.Context) (bool, error) {
		return healthA.Role() == "stopped" && code(healthA.ServeReadyz) == http.StatusServiceUnavailable && healthA.Live() != nil, nil
	})
	cluster.WaitFor(t, 30*time.Second, "b to lead with synced caches", func(ctx context.Context) (bool, error) {
		return holder(ctx) == "b" && healthB.Role() == "leader" && healthB.Ready() == nil && healthB.Live() == nil, healthB.Live()
	})
}
