package machineapi_test

// Helpers of the benchmarks of #36's figures (figures_bench_test.go,
// makespan_bench_test.go). They take testing.TB where the tests' helpers
// (coordinated_test.go, machineapi_test.go) take *testing.T.

import (
	"context"
	"fmt"
	"io"
	"log/slog"
	"math"
	"slices"
	"sync"
	"testing"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/intstr"
	"k8s.io/client-go/dynamic"
	"k8s.io/utils/ptr"

	"github.com/nodeward/nodeward/api/v1alpha1"
	"github.com/nodeward/nodeward/test/cluster"
	"github.com/nodeward/nodeward/test/coordinatortest"
	"github.com/nodeward/nodeward/test/machineapi"
	"github.com/nodeward/nodeward/test/sim"
)

// benchPool creates the pool of the nodes of MachineSet set (the stub
// labels them with the set's name), to os-2 with maxUnavailable 1, for the
// coordinator of set.
func benchPool(tb testing.TB, cp *cluster.ControlPlane, set string, paused bool) {
	tb.Helper()
	dyn, err := dynamic.NewForConfig(cp.Config())
	if err != nil {
		tb.Fatal(err)
	}
	pool := &v1alpha1.UpdatePool{ObjectMeta: metav1.ObjectMeta{Name: set, Labels: coordinatortest.PoolLabels(set)},
		Spec: v1alpha1.UpdatePoolSpec{OSImage: "os-2", MaxUnavailable: ptr.To(intstr.FromInt32(1)), Paused: paused,
			NodeSelector: &metav1.LabelSelector{MatchLabels: map[string]string{cluster.GroupLabel: set}}}}
	if err := cluster.CreatePool(context.Background(), dyn, pool); err != nil {
		tb.Fatal(err)
	}
}

// setMachines waits until MachineSet set has count Machines, none being
// deleted, each Running and linked to a Node; it returns them by name,
// mapped to their Nodes.
func setMachines(tb testing.TB, mapi *machineapi.Controllers, set string, count int, timeout time.Duration) map[string]string {
	tb.Helper()
	var out map[string]string
	cluster.WaitFor(tb, timeout, fmt.Sprintf("MachineSet %s: %d Machines Running and linked", set, count), func(ctx context.Context) (bool, error) {
		got, err := linkedMachines(ctx, mapi, set)
		if err != nil || len(got) != count {
			return false, fmt.Errorf("%d linked of the wanted %d (%v)", len(got), count, err)
		}
		out = got
		return true, nil
	})
	return out
}

// linkedMachines are set's Machines that run linked to a Node and are not
// being deleted, mapped to their Nodes; it fails if any other exists.
func linkedMachines(ctx context.Context, mapi *machineapi.Controllers, set string) (map[string]string, error) {
	ms, err := mapi.Machines(ctx, machineapi.MachineSetSelector(set))
	if err != nil {
		return nil, err
	}
	out := map[string]string{}
	for _, m := range ms {
		if m.Phase != "Running" || m.NodeRef == "" || m.DeletionTimestamp != nil {
			return out, fmt.Errorf("machine %s: phase %q, nodeRef %q, deleting %v", m.Name, m.Phase, m.NodeRef, m.DeletionTimestamp != nil)
		}
		out[m.Name] = m.NodeRef
	}
	return out, nil
}

// agentRunner runs an agent (the real update machine on a simulated host
// booted in os-1, rebooting in 3 s) with a liveness Lease on each node
// added, until stop.
type agentRunner struct {
	cp     *cluster.ControlPlane
	ctx    context.Context
	cancel context.CancelFunc
	wg     sync.WaitGroup
	mu     sync.Mutex
	agents map[string]*sim.SimNode
}

func newAgentRunner(cp *cluster.ControlPlane) *agentRunner {
	ctx, cancel := context.WithCancel(context.Background())
	return &agentRunner{cp: cp, ctx: ctx, cancel: cancel, agents: map[string]*sim.SimNode{}}
}

// add starts node's agent, unless it runs already.
func (r *agentRunner) add(tb testing.TB, node string) {
	tb.Helper()
	r.mu.Lock()
	defer r.mu.Unlock()
	if r.agents[node] != nil {
		return
	}
	if err := cluster.CreateAgentLeases(r.ctx, r.cp.Client(), []string{node}); err != nil {
		tb.Fatal(err)
	}
	n := &sim.SimNode{Name: node, Host: sim.NewSimHost("os-1"), StateDir: tb.TempDir(), RestConfig: r.cp.Config(),
		Log: slog.New(slog.NewTextHandler(io.Discard, nil)), RebootDelay: 3 * time.Second}
	r.agents[node] = n
	r.wg.Go(func() { n.RunReboots(r.ctx) })
	if err := n.Start(); err != nil {
		tb.Fatal(err)
	}
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

// firstSeen records when each key was first seen, and lets a waiter block
// until it is.
type firstSeen struct {
	mu   sync.Mutex
	at   map[string]time.Time
	seen map[string]chan struct{}
}

func newFirstSeen() *firstSeen {
	return &firstSeen{at: map[string]time.Time{}, seen: map[string]chan struct{}{}}
}

func (f *firstSeen) chanOf(key string) chan struct{} {
	if f.seen[key] == nil {
		f.seen[key] = make(chan struct{})
	}
	return f.seen[key]
}

// mark records key seen at when, if it was not seen before.
func (f *firstSeen) mark(key string, when time.Time) {
	f.mu.Lock()
	defer f.mu.Unlock()
	if _, ok := f.at[key]; ok {
		return
	}
	f.at[key] = when
	close(f.chanOf(key))
}

// wait returns when key was first seen, waiting up to timeout.
func (f *firstSeen) wait(key string, timeout time.Duration) (time.Time, error) {
	f.mu.Lock()
	ch := f.chanOf(key)
	f.mu.Unlock()
	select {
	case <-ch:
	case <-time.After(timeout):
		return time.Time{}, fmt.Errorf("%s not seen within %s", key, timeout)
	}
	f.mu.Lock()
	defer f.mu.Unlock()
	return f.at[key], nil
}

// quantile is the q-quantile of samples by the nearest rank (of 20
// samples, p99 is the largest).
func quantile(samples []time.Duration, q float64) time.Duration {
	s := slices.Clone(samples)
	slices.Sort(s)
	rank := int(math.Ceil(q*float64(len(s)))) - 1
	return s[max(rank, 0)]
}

// reportQuantiles reports the p50 and p99 of samples in milliseconds, as
// <name>-p50-ms and <name>-p99-ms.
func reportQuantiles(b *testing.B, name string, samples []time.Duration) {
	b.ReportMetric(float64(quantile(samples, 0.5).Microseconds())/1000, name+"-p50-ms")
	b.ReportMetric(float64(quantile(samples, 0.99).Microseconds())/1000, name+"-p99-ms")
}
