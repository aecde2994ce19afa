package coordinator_test

import (
	"context"
	"fmt"
	"strings"
	"testing"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/client-go/dynamic"
	"k8s.io/utils/ptr"

	"github.com/nodeward/nodeward/api/v1alpha1"
	"github.com/nodeward/nodeward/coordinator"
	"github.com/nodeward/nodeward/test/cluster"
)

// TestAdminCordonedHeldAndPausedNodesAreNeverGranted: an admin's cordon and
// an operator's hold keep a node out of the rollout; a paused pool grants
// nothing; the control-plane pool updates one node at a time.
func TestAdminCordonedHeldPausedAndControlPlane(t *testing.T) {
	t.Parallel()
	cp, dyn := setup(t)
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()

	const work, paused, control = "rules-w", "rules-p", "rules-cp"
	wNodes := cp.CreateNodes(t, cluster.NodeSpec{Prefix: work, Count: 4})
	pNodes := cp.CreateNodes(t, cluster.NodeSpec{Prefix: paused, Count: 2})
	cNodes := cp.CreateNodes(t, cluster.NodeSpec{Prefix: control, Count: 3, Role: "control-plane"})
	renewLeases(t, cp, append(append(append([]string{}, wNodes...), pNodes...), cNodes...))
	// An admin cordons w-0 (no nodeward record); an operator holds w-1.
	if _, err := cp.Client().CoreV1().Nodes().Patch(ctx, wNodes[0], "application/merge-patch+json",
		[]byte(`{"spec":{"unschedulable":true}}`), metav1.PatchOptions{}); err != nil {
		t.Fatal(err)
	}
	if err := patchAnnotations(ctx, cp, wNodes[1], map[string]any{v1alpha1.AnnotationHold: "maintenance ticket 42"}); err != nil {
		t.Fatal(err)
	}
	peakCP := watchInvariant(ctx, t, cp, control, 1)
	simulateAgents(ctx, t, cp, work, 200*time.Millisecond)
	simulateAgents(ctx, t, cp, paused, 200*time.Millisecond)
	simulateAgents(ctx, t, cp, control, 200*time.Millisecond)
	sel := func(g string) *metav1.LabelSelector {
		return &metav1.LabelSelector{MatchLabels: map[string]string{cluster.GroupLabel: g}}
	}
	createPool(t, dyn, "rules", &v1alpha1.UpdatePool{ObjectMeta: metav1.ObjectMeta{Name: work},
		Spec: v1alpha1.UpdatePoolSpec{NodeSelector: sel(work), OSImage: "os:2", MaxUnavailable: ptr.To(intstrPercent("100%")),
			LifecycleHooks: &v1alpha1.LifecycleHooks{
				PreDrain:  []v1alpha1.LifecycleHook{{Name: "quorum-guard", Owner: "etcd-operator"}},
				PreReboot: []v1alpha1.LifecycleHook{{Name: "flush-logs", Owner: "log-agent"}},
			}}})
	createPool(t, dyn, "rules", &v1alpha1.UpdatePool{ObjectMeta: metav1.ObjectMeta{Name: paused},
		Spec: v1alpha1.UpdatePoolSpec{NodeSelector: sel(paused), OSImage: "os:2", Paused: true}})
	createPool(t, dyn, "rules", &v1alpha1.UpdatePool{ObjectMeta: metav1.ObjectMeta{Name: control},
		Spec: v1alpha1.UpdatePoolSpec{NodeSelector: sel(control), OSImage: "os:2", ControlPlane: true,
			MaxUnavailable: ptr.To(intstrPercent("100%"))}})
	runCoordinator(ctx, t, cp, dyn, "rules")

	waitUpdated(t, cp, dyn, control, 3, time.Minute)
	if peakCP.Load() != 1 {
		t.Errorf("control-plane pool: peak %d nodes unavailable, want exactly 1", peakCP.Load())
	}
	waitUpdated(t, cp, dyn, work, 2, time.Minute) // w-2 and w-3 only
	cluster.WaitFor(t, 10*time.Second, "pool status to name the paused pool's wait", func(ctx context.Context) (bool, error) {
		obj, err := dyn.Resource(v1alpha1.UpdatePoolResource()).Get(ctx, paused, metav1.GetOptions{})
		if err != nil {
			return false, err
		}
		conds, _, _ := unstructured.NestedSlice(obj.Object, "status", "conditions")
		for _, c := range conds {
			m := c.(map[string]any)
			if m["type"] == "Updating" {
				return m["status"] == "False", nil
			}
		}
		return false, nil
	})
	for _, n := range wNodes[2:] {
		node, err := cp.Client().CoreV1().Nodes().Get(ctx, n, metav1.GetOptions{})
		if err != nil {
			t.Fatal(err)
		}
		if node.Annotations[v1alpha1.PreDrainHookPrefix+"quorum-guard"] != "etcd-operator" ||
			node.Annotations[v1alpha1.PreRebootHookPrefix+"flush-logs"] != "log-agent" {
			t.Errorf("granted node %s lacks the pool's lifecycle hooks: %v", n, node.Annotations)
		}
	}
	for _, n := range append([]string{wNodes[0], wNodes[1]}, pNodes...) {
		node, err := cp.Client().CoreV1().Nodes().Get(ctx, n, metav1.GetOptions{})
		if err != nil {
			t.Fatal(err)
		}
		// Staging needs no slot; anything past Staged would mean a grant.
		if g, ok := node.Annotations[v1alpha1.AnnotationGrant]; ok ||
			(node.Annotations[v1alpha1.AnnotationState] != "" && v1alpha1.Step(node.Annotations[v1alpha1.AnnotationState]) != v1alpha1.StepStaged) {
			t.Errorf("node %s was touched: grant=%q state=%q", n, g, node.Annotations[v1alpha1.AnnotationState])
		}
		if n == wNodes[0] && !node.Spec.Unschedulable {
			t.Errorf("admin-cordoned node %s was uncordoned", n)
		}
	}
}

// TestInvalidPoolsAreRejectedWithTheSchemaMessage: the API server itself
// refuses bad pools, with messages that name the field.
func TestInvalidPoolsAreRejectedWithTheSchemaMessage(t *testing.T) {
	t.Parallel()
	_, dyn := setup(t)
	for _, tc := range []struct {
		name string
		spec map[string]any
		want string
	}{
		{"pct", map[string]any{"maxUnavailable": "150%"}, "percentage from 0% to 100%"},
		{"neg", map[string]any{"maxUnavailable": int64(-1)}, "non-negative integer"},
		{"dur", map[string]any{"maintenanceWindows": []any{map[string]any{"start": "02:00", "duration": "forever"}}}, "duration"},
		{"start", map[string]any{"maintenanceWindows": []any{map[string]any{"start": "25:00", "duration": "1h"}}}, "start"},
		{"tz", map[string]any{"maintenanceWindows": []any{map[string]any{"start": "02:00", "duration": "1h", "timeZone": "not a zone!"}}}, "timeZone"},
		{"drain", map[string]any{"drain": map[string]any{"timeout": "-5m"}}, "drain.timeout must be a positive"},
		{"hook", map[string]any{"lifecycleHooks": map[string]any{"preDrain": []any{map[string]any{"name": "bad name", "owner": "x"}}}}, "name"},
		{"source-url", updateSource("url", "ftp://graph.example/graph"), "updateSource.url must be an http or https URL"},
		{"source-dialect", updateSource("dialect", "Zincati"), "spec.updateSource.dialect"},
		{"source-channel", updateSource("channel", "stable 4.18"), "spec.updateSource.channel"},
		{"source-policy", updateSource("policy", "Eager"), "spec.updateSource.policy"},
		{"source-wariness", updateSource("wariness", "1.5"), "spec.updateSource.wariness"},
		{"source-arch", updateSource("arch", "mips"), "spec.updateSource.arch"},
	} {
		spec := map[string]any{"nodeSelector": map[string]any{"matchLabels": map[string]any{"a": "b"}}}
		for k, v := range tc.spec {
			spec[k] = v
		}
		obj := &unstructured.Unstructured{Object: map[string]any{
			"apiVersion": v1alpha1.GroupName + "/" + v1alpha1.Version, "kind": "UpdatePool",
			"metadata": map[string]any{"name": "invalid-" + tc.name}, "spec": spec,
		}}
		_, err := dyn.Resource(v1alpha1.UpdatePoolResource()).Create(context.Background(), obj, metav1.CreateOptions{})
		if err == nil {
			t.Errorf("%s: the API server accepted %v", tc.name, tc.spec)
			continue
		}
		if !strings.Contains(err.Error(), tc.want) {
			t.Errorf("%s: error %q does not say %q", tc.name, err, tc.want)
		}
	}
}

// updateSource is a valid spec.updateSource with field set to value.
func updateSource(field, value string) map[string]any {
	source := map[string]any{"url": "https://graph.example/v1/graph", "dialect": "OpenShift", "channel": "stable-4.18"}
	source[field] = value
	return map[string]any{"updateSource": source}
}

// TestLeaderFailoverMidRolloutNeverOverGrants runs two leader-elected
// coordinators, stops the leader mid-rollout and checks that the other one
// finishes the rollout without ever exceeding the budget.
func TestLeaderFailoverMidRolloutNeverOverGrants(t *testing.T) {
	t.Parallel()
	cp, dyn := setup(t)
	const prefix = "failover"
	nodes := cp.CreateNodes(t, cluster.NodeSpec{Prefix: prefix, Count: 12})
	renewLeases(t, cp, nodes)
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	watchInvariant(ctx, t, cp, prefix, 3)
	simulateAgents(ctx, t, cp, prefix, 3*time.Second)
	leaderNS := cp.Namespace(t)
	start := func(id string) context.CancelFunc {
		cctx, stop := context.WithCancel(ctx)
		go func() {
			_ = coordinator.RunWithLeaderElection(cctx, coordinator.Config{Client: cp.Kube(), Dynamic: dyn, Resync: time.Second,
				PoolLabelSelector: suiteLabel + "=" + prefix, DisableGuard: true},
				coordinator.LeaderConfig{Namespace: leaderNS, Identity: id,
					LeaseDuration: 4 * time.Second, RenewDeadline: 3 * time.Second, RetryPeriod: 500 * time.Millisecond})
		}()
		return stop
	}
	stopA := start("a")
	cluster.WaitFor(t, 20*time.Second, "replica a to lead", func(ctx context.Context) (bool, error) {
		l, err := cp.Client().CoordinationV1().Leases(leaderNS).Get(ctx, coordinator.LeaderLeaseName, metav1.GetOptions{})
		return err == nil && l.Spec.HolderIdentity != nil && *l.Spec.HolderIdentity == "a", err
	})
	stopB := start("b")
	defer stopB()
	createPool(t, dyn, prefix, &v1alpha1.UpdatePool{ObjectMeta: metav1.ObjectMeta{Name: prefix}, Spec: v1alpha1.UpdatePoolSpec{
		NodeSelector:   &metav1.LabelSelector{MatchLabels: map[string]string{cluster.GroupLabel: prefix}},
		OSImage:        "os:3",
		MaxUnavailable: ptr.To(intstrPercent("25%")),
	}})
	waitUpdated(t, cp, dyn, prefix, 3, time.Minute)
	stopA() // mid-rollout
	if all := countUpdated(t, dyn, prefix); all >= 12 {
		t.Fatalf("the rollout had finished (%d updated) before the leader stopped: not a mid-rollout failover", all)
	}
	cluster.WaitFor(t, 20*time.Second, "replica b to take over", func(ctx context.Context) (bool, error) {
		l, err := cp.Client().CoordinationV1().Leases(leaderNS).Get(ctx, coordinator.LeaderLeaseName, metav1.GetOptions{})
		return err == nil && l.Spec.HolderIdentity != nil && *l.Spec.HolderIdentity == "b", err
	})
	waitUpdated(t, cp, dyn, prefix, 12, 2*time.Minute)
}

// TestSilentAgentIsNeverGrantedAndItsHealthGoesUnknown: a node whose agent
// Lease expired is not granted, its nodeward health conditions turn Unknown
// and an Event says why; its healthy peer is updated and the pool gets a
// SlotGranted Event naming it.
func TestSilentAgentIsNeverGrantedAndItsHealthGoesUnknown(t *testing.T) {
	t.Parallel()
	cp, dyn := setup(t)
	const prefix = "silent"
	nodes := cp.CreateNodes(t, cluster.NodeSpec{Prefix: prefix, Count: 2})
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	renewLeases(t, cp, nodes[1:]) // nodes[0]'s agent never renewed
	cond := `{"status":{"conditions":[{"type":"NodewardDiskPressure","status":"False","reason":"Fine","message":"ok",` +
		`"lastHeartbeatTime":"2026-01-01T00:00:00Z","lastTransitionTime":"2026-01-01T00:00:00Z"}]}}`
	if _, err := cp.Client().CoreV1().Nodes().PatchStatus(ctx, nodes[0], []byte(cond)); err != nil {
		t.Fatal(err)
	}
	simulateAgents(ctx, t, cp, prefix, 100*time.Millisecond)
	createPool(t, dyn, prefix, &v1alpha1.UpdatePool{ObjectMeta: metav1.ObjectMeta{Name: prefix}, Spec: v1alpha1.UpdatePoolSpec{
		NodeSelector:   &metav1.LabelSelector{MatchLabels: map[string]string{cluster.GroupLabel: prefix}},
		OSImage:        "os:9",
		MaxUnavailable: ptr.To(intstrPercent("100%")),
	}})
	runCoordinator(ctx, t, cp, dyn, prefix)
	waitUpdated(t, cp, dyn, prefix, 1, time.Minute)
	cluster.WaitFor(t, 20*time.Second, "silent node's health condition Unknown", func(ctx context.Context) (bool, error) {
		n, err := cp.Client().CoreV1().Nodes().Get(ctx, nodes[0], metav1.GetOptions{})
		if err != nil {
			return false, err
		}
		if _, granted := n.Annotations[v1alpha1.AnnotationGrant]; granted {
			t.Fatalf("silent node %s was granted", nodes[0])
		}
		for _, c := range n.Status.Conditions {
			if c.Type == v1alpha1.ConditionDiskPressure {
				return c.Status == "Unknown" && c.Reason == "AgentSilent", nil
			}
		}
		return false, nil
	})
	for _, want := range []struct{ object, reason, about string }{{nodes[0], "AgentSilent", ""}, {prefix, "SlotGranted", nodes[1]}} {
		cluster.WaitFor(t, 20*time.Second, want.reason+" Event on "+want.object, func(ctx context.Context) (bool, error) {
			evs, err := cp.Client().CoreV1().Events("default").List(ctx, metav1.ListOptions{
				FieldSelector: "involvedObject.name=" + want.object + ",reason=" + want.reason})
			if err != nil {
				return false, err
			}
			for _, ev := range evs.Items {
				if strings.Contains(ev.Message, want.about) {
					return true, nil
				}
			}
			return false, nil
		})
	}
}

// TestGuardIsPublished: the leader publishes the disruption guard; a zone
// whose nodes are all unhealthy is not Allowed, a healthy zone is.
func TestGuardIsPublished(t *testing.T) {
	t.Parallel()
	cp, dyn := setup(t)
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	bad := cp.CreateNodes(t, cluster.NodeSpec{Prefix: "guard-bad", Count: 2, Zones: []string{"guard-z1"}})
	cp.CreateNodes(t, cluster.NodeSpec{Prefix: "guard-ok", Count: 2, Zones: []string{"guard-z2"}})
	for _, n := range bad {
		cond := `{"status":{"conditions":[{"type":"NodewardMemoryPressure","status":"True","reason":"Test","message":"pressure",` +
			`"lastHeartbeatTime":"2026-01-01T00:00:00Z","lastTransitionTime":"2026-01-01T00:00:00Z"}]}}`
		if _, err := cp.Client().CoreV1().Nodes().PatchStatus(ctx, n, []byte(cond)); err != nil {
			t.Fatal(err)
		}
	}
	c := coordinator.New(coordinator.Config{Client: cp.Kube(), Dynamic: dyn, Resync: 200 * time.Millisecond,
		PoolLabelSelector: suiteLabel + "=guard"})
	go func() { _ = c.Run(ctx) }()
	cluster.WaitFor(t, 30*time.Second, "guard ConfigMap with zones guard-z1 not Allowed and guard-z2 Allowed", func(ctx context.Context) (bool, error) {
		cm, err := cp.Client().CoreV1().ConfigMaps(v1alpha1.AgentLeaseNamespace).Get(ctx, v1alpha1.GuardConfigMapName, metav1.GetOptions{})
		if err != nil {
			return false, err
		}
		z1, z2 := cm.Data[v1alpha1.GuardZonePrefix+"guard-z1"], cm.Data[v1alpha1.GuardZonePrefix+"guard-z2"]
		return z1 != "" && z1 != v1alpha1.GuardAllowed && z2 == v1alpha1.GuardAllowed, fmt.Errorf("z1=%q z2=%q", z1, z2)
	})
}

func countUpdated(t *testing.T, dyn dynamic.Interface, pool string) int64 {
	t.Helper()
	obj, err := dyn.Resource(v1alpha1.UpdatePoolResource()).Get(context.Background(), pool, metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	n, _, _ := unstructured.NestedInt64(obj.Object, "status", "updatedMachineCount")
	return n
}
