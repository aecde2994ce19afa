package machineapi_test

import (
	"context"
	"fmt"
	"io"
	"log/slog"
	"slices"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/watch"

	"github.com/nodeward/nodeward/api/v1alpha1"
	"github.com/nodeward/nodeward/coordinator"
	"github.com/nodeward/nodeward/daemon/update"
	"github.com/nodeward/nodeward/test/cluster"
	"github.com/nodeward/nodeward/test/machineapi"
	"github.com/nodeward/nodeward/test/sim"
)

// The helpers that run agents, and watch the nodes they update.

// agentRunner runs agents (the real update machine on simulated hosts
// booted in os-1, rebooting in 3 s, each adjusted by tune before it
// starts) until stop: the one way this package runs agents.
type agentRunner struct {
	cp     *cluster.ControlPlane
	tune   func(*sim.SimNode)
	ctx    context.Context
	cancel context.CancelFunc
	wg     sync.WaitGroup
	mu     sync.Mutex
	agents map[string]*sim.SimNode
}

func newAgentRunner(cp *cluster.ControlPlane, tune func(*sim.SimNode)) *agentRunner {
	ctx, cancel := context.WithCancel(context.Background())
	return &agentRunner{cp: cp, tune: tune, ctx: ctx, cancel: cancel, agents: map[string]*sim.SimNode{}}
}

// start runs node's agent, unless it runs already, and returns it.
func (r *agentRunner) start(tb testing.TB, node string) *sim.SimNode {
	tb.Helper()
	r.mu.Lock()
	defer r.mu.Unlock()
	if n := r.agents[node]; n != nil {
		return n
	}
	n := &sim.SimNode{Name: node, Host: sim.NewSimHost("os-1"), StateDir: tb.TempDir(), RestConfig: r.cp.Config(),
		Log: slog.New(slog.NewTextHandler(io.Discard, nil)), RebootDelay: 3 * time.Second}
	r.tune(n)
	r.agents[node] = n
	r.wg.Go(func() { n.RunReboots(r.ctx) })
	if err := n.Start(); err != nil {
		tb.Fatal(err)
	}
	return n
}

// addWithLease starts node's agent with a liveness Lease, unless it runs
// already: for a node that joins mid-test (a replacement).
func (r *agentRunner) addWithLease(tb testing.TB, node string) {
	tb.Helper()
	r.mu.Lock()
	running := r.agents[node] != nil
	r.mu.Unlock()
	if running {
		return
	}
	if err := cluster.CreateAgentLeases(r.ctx, r.cp.Client(), []string{node}); err != nil {
		tb.Fatal(err)
	}
	r.start(tb, node)
}

// stop ends every agent and waits for them.
func (r *agentRunner) stop() {
	r.cancel()
	r.wg.Wait()
	r.mu.Lock()
	defer r.mu.Unlock()
	for _, n := range r.agents {
		n.Kill()
	}
}

// runAgents runs an agent on each node until the test ends.
func runAgents(t *testing.T, cp *cluster.ControlPlane, nodes []string) {
	t.Helper()
	runAgentsWith(t, cp, nodes, func(*sim.SimNode) {})
}

// runAgentsWith is runAgents with each simulated node adjusted by tune
// before its agent starts.
func runAgentsWith(t *testing.T, cp *cluster.ControlPlane, nodes []string, tune func(*sim.SimNode)) {
	t.Helper()
	r := newAgentRunner(cp, tune)
	t.Cleanup(r.stop)
	for _, node := range nodes {
		r.start(t, node)
	}
}

// startAgent runs an agent on node until the test ends, and returns it so
// the test can kill and restart it. healthy, when not nil, holds the
// update in WaitingHealthy after the reboot until it is true: a known
// point mid-update, with the grant held and no reboot under way.
func startAgent(t *testing.T, cp *cluster.ControlPlane, node string, healthy *atomic.Bool) *sim.SimNode {
	t.Helper()
	r := newAgentRunner(cp, func(n *sim.SimNode) {
		if healthy == nil {
			return
		}
		n.Check = func(ctx context.Context, node *corev1.Node) (bool, string, error) {
			if !healthy.Load() {
				return false, "held by the test", nil
			}
			return update.Serving(ctx, node)
		}
	})
	t.Cleanup(r.stop)
	return r.start(t, node)
}

// watchDown watches the nodes of group and returns functions giving the
// most of them seen down at once so far (unschedulable or not serving; a
// deleted node is gone, not down), and the most holding a grant at once.
func watchDown(t *testing.T, cp *cluster.ControlPlane, group string) (down, granted func() int) {
	t.Helper()
	var mu sync.Mutex
	isDown, hasGrant := map[string]bool{}, map[string]bool{}
	peakDown, peakGranted := 0, 0
	cluster.WatchNodes(t, cp.Client(), metav1.ListOptions{LabelSelector: cluster.GroupLabel + "=" + group}, func(_ context.Context, ev watch.EventType, n *corev1.Node) {
		mu.Lock()
		defer mu.Unlock()
		isDown[n.Name] = n.Spec.Unschedulable || v1alpha1.NotServing(n) != ""
		hasGrant[n.Name] = n.Annotations[v1alpha1.AnnotationGrant] != ""
		if ev == watch.Deleted {
			// A deleted node is gone from the pool, not down in it.
			delete(isDown, n.Name)
			delete(hasGrant, n.Name)
		}
		peakDown, peakGranted = max(peakDown, countTrue(isDown)), max(peakGranted, countTrue(hasGrant))
	})
	peak := func(p *int) func() int {
		return func() int {
			mu.Lock()
			defer mu.Unlock()
			return *p
		}
	}
	return peak(&peakDown), peak(&peakGranted)
}

func countTrue(m map[string]bool) int {
	n := 0
	for _, v := range m {
		if v {
			n++
		}
	}
	return n
}

// nodeDone reports whether node finished its update to os-2.
func nodeDone(ctx context.Context, cp *cluster.ControlPlane, node string) (bool, error) {
	n, err := cp.Client().CoreV1().Nodes().Get(ctx, node, metav1.GetOptions{})
	if err != nil {
		return false, err
	}
	state, target := n.Annotations[v1alpha1.AnnotationState], n.Annotations[v1alpha1.AnnotationStateTarget]
	return state == string(v1alpha1.StepDone) && target == "os-2", fmt.Errorf("state %s for %s", state, target)
}

// hookNames are the names of a Machine's pre-drain hooks.
func hookNames(m *machineapi.Machine) []string {
	var names []string
	for _, h := range m.PreDrainHooks {
		names = append(names, h.Name)
	}
	return names
}

// nodewardHooked reports whether nodeward's pre-drain hook is on Machine
// name.
func nodewardHooked(ctx context.Context, mapi *machineapi.Controllers, name string) (bool, error) {
	m, err := mapi.Machine(ctx, name)
	if err != nil {
		return false, err
	}
	return slices.Contains(hookNames(m), coordinator.MachineHookName), nil
}
