// Package guardrails benchmarks what the rollout guardrails cost: the
// makespan of a rollout with a soak S over W waves against the same
// rollout without one, on the real control plane with the real
// coordinator and real agents on simulated hosts.
//
//	go test ./test/bench/guardrails -run '^$' -bench . -benchtime 1x
package guardrails

import (
	"context"
	"fmt"
	"io"
	"log/slog"
	"math"
	"os"
	"sync/atomic"
	"testing"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/intstr"
	"k8s.io/client-go/dynamic"
	"k8s.io/utils/ptr"

	"github.com/nodeward/nodeward/api/v1alpha1"
	"github.com/nodeward/nodeward/test/cluster"
	"github.com/nodeward/nodeward/test/coordinatortest"
	"github.com/nodeward/nodeward/test/sim"
)

var env cluster.Env

func TestMain(m *testing.M) { os.Exit(env.Run(m)) }

const (
	download = time.Second     // simulated pull of the new OS image
	reboot   = time.Second     // simulated reboot
	soak     = 8 * time.Second // the soak measured
)

var runs atomic.Int64

// rollout updates count fresh nodes under maxUnavailable with the given
// soak, coordinated by a real coordinator, and returns the makespan: from
// the pool's creation to every node Done with its slot given back.
func rollout(b *testing.B, count, maxUnavailable int, soak string) time.Duration {
	b.Helper()
	cp := env.ControlPlane(b)
	dyn, err := dynamic.NewForConfig(cp.Config())
	if err != nil {
		b.Fatal(err)
	}
	if err := cp.InstallCRDs(context.Background()); err != nil {
		b.Fatal(err)
	}
	prefix := fmt.Sprintf("soak%d", runs.Add(1))
	names := cp.CreateNodes(b, cluster.NodeSpec{Prefix: prefix, Count: count})
	if err := cluster.CreateAgentLeases(context.Background(), cp.Client(), names); err != nil {
		b.Fatal(err)
	}
	log := slog.New(slog.NewTextHandler(io.Discard, nil))
	_, stop, err := sim.StartFleet(names, func(name string) *sim.SimNode {
		host := sim.NewSimHost("os-1")
		host.StageDelay = download
		return &sim.SimNode{Name: name, Host: host, StateDir: b.TempDir(), RestConfig: cp.Config(), Log: log, RebootDelay: reboot}
	})
	if err != nil {
		b.Fatal(err)
	}
	defer stop()
	// Deferred after the agents' stop: the coordinator stops first, then
	// the agents; the benchmark's next rollout runs a coordinator of its
	// own.
	stopCoordinator := coordinatortest.Start(b, cp, coordinatortest.Options{Pools: prefix, Log: log, DisableGuard: true})
	defer stopCoordinator()
	ctx := context.Background()
	pool := &v1alpha1.UpdatePool{ObjectMeta: metav1.ObjectMeta{Name: prefix, Labels: coordinatortest.PoolLabels(prefix)},
		Spec: v1alpha1.UpdatePoolSpec{
			NodeSelector: &metav1.LabelSelector{MatchLabels: map[string]string{cluster.GroupLabel: prefix}},
			OSImage:      "os-2", MaxUnavailable: ptr.To(intstr.FromInt32(int32(maxUnavailable))), Soak: soak,
		}}
	b.ResetTimer()
	start := time.Now()
	if err := cluster.CreatePool(ctx, dyn, pool); err != nil {
		b.Fatal(err)
	}
	cluster.WaitFor(b, 10*time.Minute, "every node Done, every slot back", func(ctx context.Context) (bool, error) {
		list, err := cp.Client().CoreV1().Nodes().List(ctx, metav1.ListOptions{LabelSelector: cluster.GroupLabel + "=" + prefix})
		if err != nil {
			return false, err
		}
		for _, n := range list.Items {
			if n.Annotations[v1alpha1.AnnotationState] != string(v1alpha1.StepDone) || n.Annotations[v1alpha1.AnnotationGrant] != "" {
				return false, nil
			}
		}
		return true, nil
	})
	b.StopTimer()
	return time.Since(start)
}

// BenchmarkSoakMakespan: 12 nodes at maxUnavailable 4 (W = 3 waves), once
// without a soak and once with a soak S; the goal is makespan(S) =
// makespan(0) + W × S within 10 %.
func BenchmarkSoakMakespan(b *testing.B) {
	const n, m = 12, 4
	waves := int(math.Ceil(float64(n) / float64(m)))
	var plain, soaked time.Duration
	for range b.N {
		plain += rollout(b, n, m, "")
		soaked += rollout(b, n, m, soak.String())
	}
	// Means over the b.N pairs of rollouts.
	plain, soaked = plain/time.Duration(b.N), soaked/time.Duration(b.N)
	expected := plain + time.Duration(waves)*soak
	b.ReportMetric(plain.Seconds(), "s-makespan-no-soak")
	b.ReportMetric(soaked.Seconds(), "s-makespan-soak")
	b.ReportMetric(expected.Seconds(), "s-expected")
	b.ReportMetric(soaked.Seconds()/expected.Seconds(), "soak/expected")
	b.ReportMetric(0, "ns/op")
}
