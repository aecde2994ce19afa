package coordinator_test

import (
	"context"
	"testing"

	"k8s.io/apimachinery/pkg/util/intstr"
	"k8s.io/client-go/dynamic"

	"github.com/nodeward/nodeward/test/cluster"
)

func intstrPercent(s string) intstr.IntOrString { return intstr.FromString(s) }

func intstrInt(n int32) intstr.IntOrString { return intstr.FromInt32(n) }

// rig is one test's corner of the shared control plane: its nodes with
// live agent Leases, a watcher that fails the test when more than limit of
// them are unavailable, and scripted agents answering grants.
type rig struct {
	cp     *cluster.ControlPlane
	dyn    dynamic.Interface
	nodes  []string
	ctx    context.Context
	sel    string
	agents *agents
}

func newRig(t *testing.T, prefix string, count, limit int) *rig {
	t.Helper()
	cp, dyn := setup(t)
	nodes := cp.CreateNodes(t, cluster.NodeSpec{Prefix: prefix, Count: count})
	renewLeases(t, cp, nodes)
	ctx, cancel := context.WithCancel(context.Background())
	t.Cleanup(cancel)
	sel := cluster.GroupLabel + "=" + prefix
	watchUnavailable(ctx, t, cp, sel, limit)
	return &rig{cp: cp, dyn: dyn, nodes: nodes, ctx: ctx, sel: sel, agents: scriptAgents(ctx, t, cp, sel)}
}
