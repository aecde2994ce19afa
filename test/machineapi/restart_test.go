package machineapi_test

import (
	"context"
	"fmt"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/nodeward/nodeward/api/v1alpha1"
	"github.com/nodeward/nodeward/test/cluster"
	"github.com/nodeward/nodeward/test/coordinatortest"
	"github.com/nodeward/nodeward/test/machineapi"
	"github.com/nodeward/nodeward/test/sim"
)

// TestHookReleasedAfterCoordinatorAndAgentRestart: the coordinator and the
// agent of the node it granted die mid-update (no hand-over: a crash),
// with nodeward's pre-drain hook on the node's Machine under the real
// machine controllers. The restarted coordinator and agent finish the
// update and the hook is dropped: a crash never leaves it behind to hold
// a later deletion of the Machine forever. The other node updates after,
// and at no time are both down.
func TestHookReleasedAfterCoordinatorAndAgentRestart(t *testing.T) {
	const prefix = "restart"
	cp, mapi, nodes, agents, healthy := machinesWithHeldAgents(t, prefix)
	ctx := context.Background()
	down, _ := watchDown(t, cp, prefix)
	createPool(t, cp, prefix)
	opts := coordinatortest.Options{Pools: prefix, Resync: time.Second}
	stop := coordinatortest.Start(t, cp, opts)

	// The granted node, rebooted and held in WaitingHealthy: mid-update,
	// its grant and its Machine's hook held.
	first := waitStep(t, cp, nodes, v1alpha1.StepWaitingHealthy)
	machine := machineOfNode(nodes, first)
	if hooked, err := nodewardHooked(ctx, mapi, machine); err != nil || !hooked {
		t.Fatalf("Machine %s of %s, mid-update: nodeward's hook held %v (%v), want true", machine, first, hooked, err)
	}
	stop()
	agents[first].Kill()
	healthy.Store(true)
	if hooked, err := nodewardHooked(ctx, mapi, machine); err != nil || !hooked {
		t.Fatalf("Machine %s after the crash: nodeward's hook held %v (%v); nothing should have dropped it", machine, hooked, err)
	}

	restarted := time.Now()
	coordinatortest.Start(t, cp, opts)
	if err := agents[first].Start(); err != nil {
		t.Fatal(err)
	}
	cluster.WaitFor(t, 2*time.Minute, first+" Done after the restarts", func(ctx context.Context) (bool, error) {
		return nodeDone(ctx, cp, first)
	})
	waitUnhooked(t, mapi, machine)
	t.Logf("restarted: %s Done and its Machine's hook dropped %s after the restarts", first, time.Since(restarted).Round(10*time.Millisecond))
	other := nodes[0]
	if other == first {
		other = nodes[1]
	}
	cluster.WaitFor(t, 2*time.Minute, other+" updated", func(ctx context.Context) (bool, error) {
		return nodeDone(ctx, cp, other)
	})
	waitUnhooked(t, mapi, machineOfNode(nodes, other))
	if max := down(); max > 1 {
		t.Errorf("%d nodes of the pool were down at once; maxUnavailable is 1", max)
	}
}

// machinesWithHeldAgents is machinesWithAgents with agents the test can
// kill and restart, whose updates wait in WaitingHealthy until healthy is
// set.
func machinesWithHeldAgents(t *testing.T, prefix string) (*cluster.ControlPlane, *machineapi.Controllers, []string, map[string]*sim.SimNode, *atomic.Bool) {
	t.Helper()
	cp, mapi, nodes := adoptedNodes(t, cluster.NodeSpec{Prefix: prefix, Count: 2, Role: "worker"}, "worker", nil)
	healthy := &atomic.Bool{}
	agents := map[string]*sim.SimNode{}
	for _, node := range nodes {
		agents[node] = startAgent(t, cp, node, healthy)
	}
	return cp, mapi, nodes, agents, healthy
}

// machineOfNode is the name of the Machine of node nodes[i]: the nodes'
// prefix, "-m" and i.
func machineOfNode(nodes []string, node string) string {
	for i, n := range nodes {
		if n == node {
			return fmt.Sprintf("%s-m%d", strings.TrimSuffix(n, fmt.Sprintf("-%d", i)), i)
		}
	}
	return ""
}

// waitStep waits until one of nodes reaches step and returns it.
func waitStep(t *testing.T, cp *cluster.ControlPlane, nodes []string, step v1alpha1.Step) string {
	t.Helper()
	var found string
	cluster.WaitFor(t, 2*time.Minute, "a node in "+string(step), func(ctx context.Context) (bool, error) {
		for _, node := range nodes {
			n, err := cp.Client().CoreV1().Nodes().Get(ctx, node, metav1.GetOptions{})
			if err != nil {
				return false, err
			}
			if v1alpha1.Step(n.Annotations[v1alpha1.AnnotationState]) == step {
				found = node
				return true, nil
			}
		}
		return false, nil
	})
	return found
}

// waitUnhooked waits until nodeward's hook is off Machine name.
func waitUnhooked(t *testing.T, mapi *machineapi.Controllers, name string) {
	t.Helper()
	cluster.WaitFor(t, 30*time.Second, "nodeward's hook dropped from Machine "+name, func(ctx context.Context) (bool, error) {
		hooked, err := nodewardHooked(ctx, mapi, name)
		return err == nil && !hooked, err
	})
}
