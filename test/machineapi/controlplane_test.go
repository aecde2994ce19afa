package machineapi_test

import (
	"context"
	"fmt"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/watch"

	"github.com/nodeward/nodeward/api/v1alpha1"
	"github.com/nodeward/nodeward/test/cluster"
	"github.com/nodeward/nodeward/test/coordinatortest"
	"github.com/nodeward/nodeward/test/machineapi"
)

// etcdHook is the etcd quorum hook as OpenShift's etcd operator keeps it
// on every control-plane Machine not being deleted, and drops from a
// deleting one once its etcd member is gone.
var etcdHook = machineapi.Hook{Name: "EtcdQuorumOperator", Owner: "clusteroperator/etcd"}

// TestControlPlaneReplacementHoldsControlPlaneGrants replaces a
// control-plane Machine the way the control-plane machine set does, under
// the real machine controllers: a replacement is created (its instance
// takes a while to boot), then the old Machine is deleted, its drain held
// by the etcd quorum hook until the replacement's node is Ready (the test
// plays the etcd operator). The coordinator grants no control-plane node
// while the replacement provisions, the old Machine is being deleted or
// the etcd hook holds it; once the old Machine is gone the pool updates
// its control-plane nodes, the replacement's too, one at a time, the etcd
// hook kept on the others throughout (it is on every control-plane Machine
// in OpenShift: it holds no grant by itself).
func TestControlPlaneReplacementHoldsControlPlaneGrants(t *testing.T) {
	const prefix = "cpr"
	began := time.Now()
	cp, mapi, nodes := controlPlaneMachines(t, prefix)
	ctx := context.Background()
	down, granted := watchDown(t, cp, prefix)
	grants := watchControlPlaneGrants(t, cp, mapi, prefix)
	createPool(t, cp, prefix)
	old, oldNode, replacement := prefix+"-m0", nodes[0], prefix+"-m3"
	if err := cluster.CreateAgentLeases(ctx, cp.Client(), []string{replacement}); err != nil {
		t.Fatal(err)
	}
	mapi.CreateMachine(ctx, machineapi.MachineSpec{Name: replacement, Role: "master", CreateDelay: 25 * time.Second,
		Labels: map[string]string{cluster.GroupLabel: prefix}, PreDrainHooks: []machineapi.Hook{etcdHook}})
	coordinatortest.Start(t, cp, coordinatortest.Options{Pools: prefix, Resync: time.Second})

	// The replacement provisions: the pool waits, naming it.
	waitPoolNames(t, mapi, prefix, replacement, "provisioning")
	mapi.DeleteMachine(ctx, old)
	waitDrainHeldBy(t, mapi, old, etcdHook.Name)
	// Its instance booted, the replacement's node joins and its agent
	// starts; the old Machine is still held by the etcd hook.
	cluster.WaitFor(t, 2*time.Minute, "the replacement's node Ready", func(ctx context.Context) (bool, error) {
		n, err := cp.Client().CoreV1().Nodes().Get(ctx, replacement, metav1.GetOptions{})
		return err == nil && cluster.NodeReady(n), err
	})
	waitLinked(t, cp, mapi, replacement, replacement)
	startAgent(t, cp, replacement, nil)
	waitPoolNames(t, mapi, prefix, oldNode)
	if m, err := mapi.Machine(ctx, old); err != nil || m.DeletionTimestamp == nil || !slices.Contains(hookNames(m), etcdHook.Name) {
		t.Fatalf("old Machine %s: want deleting and held by %s, got %+v (%v)", old, etcdHook.Name, m, err)
	}
	// The etcd operator's part: the member moved, the hook goes.
	mapi.SetLifecycleHooks(ctx, old, nil, nil)
	waitGone(t, cp, mapi, old, oldNode, 2*time.Minute)
	gone := time.Now()

	updated := []string{nodes[1], nodes[2], replacement}
	cluster.WaitFor(t, 4*time.Minute, "the control-plane nodes updated", func(ctx context.Context) (bool, error) {
		for _, n := range updated {
			if ok, err := nodeDone(ctx, cp, n); !ok {
				return false, fmt.Errorf("%s: %w", n, err)
			}
		}
		return true, nil
	})
	first := grants()
	t.Logf("old Machine gone %s into the test; first control-plane grant %s after; all updated %s after",
		gone.Sub(began).Round(10*time.Millisecond), first.Sub(gone).Round(10*time.Millisecond), time.Since(gone).Round(10*time.Millisecond))
	if max := down(); max > 1 {
		t.Errorf("%d control-plane nodes were down at once; one at a time", max)
	}
	if max := granted(); max > 1 {
		t.Errorf("%d control-plane nodes held a grant at once; one at a time", max)
	}
	checkHooksAfter(t, mapi, []string{prefix + "-m1", prefix + "-m2", replacement})
}

// controlPlaneMachines makes three control-plane nodes of prefix, each
// adopted by a master Machine (prefix-m0..m2) carrying the etcd hook, and
// runs their agents.
func controlPlaneMachines(t *testing.T, prefix string) (*cluster.ControlPlane, *machineapi.Controllers, []string) {
	t.Helper()
	cp, mapi, nodes := adoptedNodes(t, cluster.NodeSpec{Prefix: prefix, Count: 3, Role: "control-plane",
		Labels: map[string]string{"node-role.kubernetes.io/master": ""}}, "master", []machineapi.Hook{etcdHook})
	for _, node := range nodes {
		startAgent(t, cp, node, nil)
	}
	return cp, mapi, nodes
}

// watchControlPlaneGrants watches group's nodes and, at each new grant,
// reads the control-plane Machines: one still provisioning or being
// deleted then was so when the grant was written (neither goes back), a
// grant the coordinator must not have written: each fails the test when it
// ends. It returns when the first grant was seen.
func watchControlPlaneGrants(t *testing.T, cp *cluster.ControlPlane, mapi *machineapi.Controllers, group string) func() time.Time {
	t.Helper()
	var mu sync.Mutex
	var first time.Time
	var violations []string
	// Registered before the watch's own cleanup, this runs after it: the
	// watch has stopped.
	t.Cleanup(func() {
		for _, v := range violations {
			t.Error(v)
		}
	})
	seen := map[string]string{}
	cluster.WatchNodes(t, cp.Client(), metav1.ListOptions{LabelSelector: cluster.GroupLabel + "=" + group}, func(ctx context.Context, _ watch.EventType, n *corev1.Node) {
		grant := n.Annotations[v1alpha1.AnnotationGrant]
		if grant == "" || seen[n.Name] == grant {
			return
		}
		seen[n.Name] = grant
		why := controlPlaneInTheWay(ctx, mapi)
		mu.Lock()
		defer mu.Unlock()
		if first.IsZero() {
			first = time.Now()
		}
		if why != "" {
			violations = append(violations, fmt.Sprintf("control-plane node %s granted (%s) while %s", n.Name, grant, why))
		}
	})
	return func() time.Time {
		mu.Lock()
		defer mu.Unlock()
		return first
	}
}

// controlPlaneInTheWay says which control-plane Machine forbids a
// control-plane grant now: one without a node yet, or being deleted (its
// other owners' pre-drain hooks named), "" when none does.
func controlPlaneInTheWay(ctx context.Context, mapi *machineapi.Controllers) string {
	ms, err := mapi.Machines(ctx, machineapi.LabelMachineRole+"=master")
	if err != nil {
		return "the Machines could not be read: " + err.Error()
	}
	var why []string
	for _, m := range ms {
		switch {
		case m.DeletionTimestamp != nil:
			why = append(why, fmt.Sprintf("Machine %s is being deleted (phase %s, pre-drain hooks %v)", m.Name, m.Phase, hookNames(m)))
		case m.NodeRef == "":
			why = append(why, fmt.Sprintf("Machine %s is provisioning (phase %q)", m.Name, m.Phase))
		}
	}
	return strings.Join(why, "; ")
}

// waitPoolNames waits until pool's Updating condition names each of want
// (a Machine or node, and why it is counted): the coordinator saw it.
func waitPoolNames(tb testing.TB, mapi *machineapi.Controllers, pool string, want ...string) {
	tb.Helper()
	cluster.WaitFor(tb, time.Minute, fmt.Sprintf("pool %s's status naming %q", pool, want), func(ctx context.Context) (bool, error) {
		p, err := mapi.Dynamic.Resource(v1alpha1.UpdatePoolResource()).Get(ctx, pool, metav1.GetOptions{})
		if err != nil {
			return false, err
		}
		msg := poolUpdatingMessage(p)
		for _, w := range want {
			if !strings.Contains(msg, w) {
				return false, fmt.Errorf("Updating: %q", msg)
			}
		}
		return true, nil
	})
}

// poolUpdatingMessage is the message of a pool's Updating condition, which
// lists its unavailable nodes and why.
func poolUpdatingMessage(p *unstructured.Unstructured) string {
	conds, _, _ := unstructured.NestedSlice(p.Object, "status", "conditions")
	for _, c := range conds {
		cond, _ := c.(map[string]any)
		if cond["type"] == v1alpha1.PoolUpdating {
			msg, _ := cond["message"].(string)
			return msg
		}
	}
	return ""
}

// waitDrainHeldBy waits until the deleting Machine name's drain is held
// by the pre-drain hook hook (Drainable False naming it).
func waitDrainHeldBy(t *testing.T, mapi *machineapi.Controllers, name, hook string) {
	t.Helper()
	cluster.WaitFor(t, time.Minute, "the drain of Machine "+name+" held by "+hook, func(ctx context.Context) (bool, error) {
		m, err := mapi.Machine(ctx, name)
		if err != nil {
			return false, err
		}
		c := m.Condition("Drainable")
		return m.Phase == "Deleting" && c != nil && c.Status == "False" && strings.Contains(c.Message, hook),
			fmt.Errorf("phase %s, Drainable %+v", m.Phase, c)
	})
}

// checkHooksAfter checks that the etcd hook is still on each Machine (no
// one but its owner touches it) and nodeward's gone (every update ended).
func checkHooksAfter(t *testing.T, mapi *machineapi.Controllers, machines []string) {
	t.Helper()
	for _, name := range machines {
		waitUnhooked(t, mapi, name)
		m, err := mapi.Machine(context.Background(), name)
		if err != nil {
			t.Fatal(err)
		}
		if !slices.Contains(hookNames(m), etcdHook.Name) {
			t.Errorf("Machine %s: pre-drain hooks %v, want %s kept", name, hookNames(m), etcdHook.Name)
		}
	}
}
