package machineapi_test

import (
	"context"
	"fmt"
	"io"
	"log/slog"
	"os"
	"strings"
	"testing"
	"time"

	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/intstr"
	"k8s.io/client-go/dynamic"
	"k8s.io/utils/ptr"

	"github.com/nodeward/nodeward/api/v1alpha1"
	"github.com/nodeward/nodeward/test/cluster"
	"github.com/nodeward/nodeward/test/coordinatortest"
	"github.com/nodeward/nodeward/test/machineapi"
)

// TestMachineDeletedMidUpdateWaitsForTheUpdate runs nodeward's coordinator
// and two agents (the real update machine on simulated hosts) beside the
// real machine and drain controllers. The coordinator grants one node and
// holds its Machine's pre-drain hook; the Machine is deleted mid-update.
// The machine controller's drain waits (Drainable False naming the hook)
// while the agent updates; once it is Done the hook is dropped, the
// machine controller drains and deletes the node, and the pool updates its
// other node. At no time are both nodes down.
func TestMachineDeletedMidUpdateWaitsForTheUpdate(t *testing.T) {
	const prefix = "coord"
	cp, mapi, nodes := machinesWithAgents(t, prefix)
	ctx := context.Background()
	down, _ := watchDown(t, cp, prefix)
	log := slog.New(slog.NewTextHandler(io.Discard, nil))
	if testing.Verbose() {
		log = slog.New(slog.NewTextHandler(os.Stderr, &slog.HandlerOptions{Level: slog.LevelInfo}))
	}
	createPool(t, cp, prefix)
	coordinatortest.Start(t, cp, coordinatortest.Options{Pools: prefix, Resync: time.Second, Log: log})

	// The first node granted, mid-update: its Machine is deleted.
	var first string
	cluster.WaitFor(t, 2*time.Minute, "a node draining or rebooting for its update", func(ctx context.Context) (bool, error) {
		for _, node := range nodes {
			n, err := cp.Client().CoreV1().Nodes().Get(ctx, node, metav1.GetOptions{})
			if err != nil {
				return false, err
			}
			switch v1alpha1.Step(n.Annotations[v1alpha1.AnnotationState]) {
			case v1alpha1.StepDraining, v1alpha1.StepHooksPreReboot, v1alpha1.StepFinalizing, v1alpha1.StepRebooting:
				first = node
				return true, nil
			}
		}
		return false, nil
	})
	machine := map[string]string{nodes[0]: prefix + "-m0", nodes[1]: prefix + "-m1"}[first]
	mapi.DeleteMachine(ctx, machine)
	cluster.WaitFor(t, time.Minute, "the deleting Machine's drain held by nodeward's hook", func(ctx context.Context) (bool, error) {
		m, err := mapi.Machine(ctx, machine)
		if err != nil {
			return false, err
		}
		c := m.Condition("Drainable")
		return c != nil && c.Status == "False" && strings.Contains(c.Message, "nodeward.io/Update"), fmt.Errorf("Drainable %+v", c)
	})
	// The agent finishes its update; then the machine controller drains
	// and deletes the node.
	cluster.WaitFor(t, 2*time.Minute, first+" Done", func(ctx context.Context) (bool, error) {
		n, err := cp.Client().CoreV1().Nodes().Get(ctx, first, metav1.GetOptions{})
		if err != nil {
			return false, fmt.Errorf("node %s: %w (deleted before its update was Done)", first, err)
		}
		return n.Annotations[v1alpha1.AnnotationState] == string(v1alpha1.StepDone) && n.Annotations[v1alpha1.AnnotationStateTarget] == "os-2", nil
	})
	waitGone(t, cp, mapi, machine, first, 2*time.Minute)
	other := nodes[0]
	if other == first {
		other = nodes[1]
	}
	cluster.WaitFor(t, 2*time.Minute, other+" updated", func(ctx context.Context) (bool, error) {
		n, err := cp.Client().CoreV1().Nodes().Get(ctx, other, metav1.GetOptions{})
		if err != nil {
			return false, err
		}
		return n.Annotations[v1alpha1.AnnotationState] == string(v1alpha1.StepDone) && n.Annotations[v1alpha1.AnnotationStateTarget] == "os-2", nil
	})
	if max := down(); max > 1 {
		t.Errorf("%d nodes of the pool were down at once; maxUnavailable is 1", max)
	}
}

// TestMachineDeletedWhileStagedHoldsThePool: the Machine of one of two
// staged nodes is deleted before the rollout starts. Under maxUnavailable 1
// the coordinator grants the other node nothing while the machine
// controller drains and deletes it; once the Machine is gone, the other
// node updates.
func TestMachineDeletedWhileStagedHoldsThePool(t *testing.T) {
	const prefix = "staged"
	cp, mapi, nodes := machinesWithAgents(t, prefix)
	ctx := context.Background()
	createPool(t, cp, prefix)
	mapi.DeleteMachine(ctx, prefix+"-m1")
	coordinatortest.Start(t, cp, coordinatortest.Options{Pools: prefix, Resync: time.Second})
	// Until the deleted Machine is gone, nothing is granted.
	cluster.WaitFor(t, 2*time.Minute, "the deleted Machine gone, nothing granted meanwhile", func(ctx context.Context) (bool, error) {
		n, err := cp.Client().CoreV1().Nodes().Get(ctx, nodes[0], metav1.GetOptions{})
		if err != nil {
			return false, err
		}
		if g := n.Annotations[v1alpha1.AnnotationGrant]; g != "" {
			if _, err := mapi.Machine(ctx, prefix+"-m1"); err == nil {
				t.Fatalf("%s granted (%s) while the Machine of %s is being deleted", nodes[0], g, nodes[1])
			}
		}
		_, err = mapi.Machine(ctx, prefix+"-m1")
		return apierrors.IsNotFound(err), nil
	})
	cluster.WaitFor(t, 2*time.Minute, nodes[0]+" updated", func(ctx context.Context) (bool, error) {
		n, err := cp.Client().CoreV1().Nodes().Get(ctx, nodes[0], metav1.GetOptions{})
		if err != nil {
			return false, err
		}
		return n.Annotations[v1alpha1.AnnotationState] == string(v1alpha1.StepDone) && n.Annotations[v1alpha1.AnnotationStateTarget] == "os-2", nil
	})
}

// machinesWithAgents starts the Machine API controllers, and two nodes of
// prefix, each adopted by a Machine (prefix-m0, prefix-m1) and run by an
// agent with a renewed Lease.
func machinesWithAgents(t *testing.T, prefix string) (*cluster.ControlPlane, *machineapi.Controllers, []string) {
	t.Helper()
	cp, mapi, nodes := adoptedNodes(t, cluster.NodeSpec{Prefix: prefix, Count: 2, Role: "worker"}, "worker", nil)
	runAgents(t, cp, nodes)
	return cp, mapi, nodes
}

// adoptedNodes starts the Machine API controllers and creates the nodes of
// spec, each adopted by a Machine of machineRole carrying hooks (the
// Machine of spec.Prefix-<i> is spec.Prefix-m<i>) and linked to it, each
// with an agent Lease; no agent runs yet.
func adoptedNodes(t *testing.T, spec cluster.NodeSpec, machineRole string, hooks []machineapi.Hook) (*cluster.ControlPlane, *machineapi.Controllers, []string) {
	t.Helper()
	cp := env.ControlPlane(t)
	mapi := machineapi.Start(t, cp, machineapi.Options{})
	ctx := context.Background()
	if err := cp.InstallCRDs(ctx); err != nil {
		t.Fatal(err)
	}
	nodes := cp.CreateNodes(t, spec)
	for i, node := range nodes {
		name := fmt.Sprintf("%s-m%d", spec.Prefix, i)
		mapi.CreateMachine(ctx, machineapi.MachineSpec{Name: name, Role: machineRole, NodeName: node, PreDrainHooks: hooks})
		waitLinked(t, cp, mapi, name, node)
	}
	if err := cluster.CreateAgentLeases(ctx, cp.Client(), nodes); err != nil {
		t.Fatal(err)
	}
	return cp, mapi, nodes
}

// createPool creates the pool of group's nodes, to os-2 with
// maxUnavailable 1, for the coordinator of group.
func createPool(tb testing.TB, cp *cluster.ControlPlane, group string) {
	tb.Helper()
	createPoolPaused(tb, cp, group, false)
}

// createPoolPaused is createPool, the pool paused (nothing granted) when
// paused is true.
func createPoolPaused(tb testing.TB, cp *cluster.ControlPlane, group string, paused bool) {
	tb.Helper()
	dyn, err := dynamic.NewForConfig(cp.Config())
	if err != nil {
		tb.Fatal(err)
	}
	pool := &v1alpha1.UpdatePool{ObjectMeta: metav1.ObjectMeta{Name: group, Labels: coordinatortest.PoolLabels(group)},
		Spec: v1alpha1.UpdatePoolSpec{OSImage: "os-2", MaxUnavailable: ptr.To(intstr.FromInt32(1)), Paused: paused,
			NodeSelector: &metav1.LabelSelector{MatchLabels: map[string]string{cluster.GroupLabel: group}}}}
	if err := cluster.CreatePool(context.Background(), dyn, pool); err != nil {
		tb.Fatal(err)
	}
}
