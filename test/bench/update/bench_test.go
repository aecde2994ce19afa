// Package update benchmarks the update lifecycle on the real control plane
// with simulated hosts: the unavailable window with pre-staging versus
// staging after the drain (the machine-config-daemon's order), and the
// makespan of a 100-node rollout against the ideal ceil(N/M) × per-node time.
//
//	go test ./test/bench/update -run '^$' -bench . -benchtime 1x
package update

import (
	"context"
	"fmt"
	"io"
	"log/slog"
	"math"
	"os"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/nodeward/nodeward/api/v1alpha1"
	"github.com/nodeward/nodeward/daemon/update"
	"github.com/nodeward/nodeward/test/cluster"
	"github.com/nodeward/nodeward/test/sim"
)

var env cluster.Env

func TestMain(m *testing.M) { os.Exit(env.Run(m)) }

const (
	download = 3 * time.Second // simulated pull of the new OS image
	reboot   = 1 * time.Second // simulated reboot
)

var prefixes atomic.Int64

// rollout updates count fresh nodes under maxUnavailable and returns the
// makespan (first grant to last Done) and each node's unavailable time
// (cordon to Done, as the agent reports it).
func rollout(b *testing.B, count, maxUnavailable int, stageAfterDrain bool) (time.Duration, []time.Duration) {
	b.Helper()
	cp := env.ControlPlane(b)
	prefix := fmt.Sprintf("bench%d", prefixes.Add(1))
	names := cp.CreateNodes(b, cluster.NodeSpec{Prefix: prefix, Count: count})
	log := slog.New(slog.NewTextHandler(io.Discard, nil))
	_, stop, err := sim.StartFleet(names, func(name string) *sim.SimNode {
		host := sim.NewSimHost("os-1")
		host.StageDelay = download
		return &sim.SimNode{Name: name, Host: host, StateDir: b.TempDir(), RestConfig: cp.Config(), Log: log,
			RebootDelay: reboot, TuneUpdate: func(c *update.Config) { c.StageAfterDrain = stageAfterDrain }}
	})
	if err != nil {
		b.Fatal(err)
	}
	defer stop()
	// Deferred in this order: the context ends, then its goroutines are
	// waited for, then the agents stop.
	var wg sync.WaitGroup
	defer wg.Wait()
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	granter := &sim.Granter{Client: cp.Client(), Selector: cluster.GroupLabel + "=" + prefix, Target: "os-2",
		MaxUnavailable: maxUnavailable}
	b.ResetTimer()
	start := time.Now()
	wg.Go(func() { granter.Run(ctx, 100*time.Millisecond) })
	done := map[string]time.Time{}
	since := map[string]time.Time{}
	cluster.WaitFor(b, 20*time.Minute, "every node Done", func(ctx context.Context) (bool, error) {
		list, err := cp.Client().CoreV1().Nodes().List(ctx, metav1.ListOptions{LabelSelector: cluster.GroupLabel + "=" + prefix})
		if err != nil {
			return false, err
		}
		now := time.Now()
		for _, n := range list.Items {
			if t, err := time.Parse(time.RFC3339Nano, n.Annotations[v1alpha1.AnnotationUnavailableSince]); err == nil {
				since[n.Name] = t
			}
			if n.Annotations[v1alpha1.AnnotationState] == string(v1alpha1.StepDone) && done[n.Name].IsZero() {
				done[n.Name] = now
			}
		}
		return len(done) == count, nil
	})
	b.StopTimer()
	var last time.Time
	unavailable := make([]time.Duration, 0, count)
	for name, t := range done {
		last = maxTime(last, t)
		unavailable = append(unavailable, t.Sub(since[name]))
	}
	return last.Sub(start), unavailable
}

func maxTime(a, b time.Time) time.Time {
	if b.After(a) {
		return b
	}
	return a
}

func mean(ds []time.Duration) time.Duration {
	var sum time.Duration
	for _, d := range ds {
		sum += d
	}
	return sum / time.Duration(max(len(ds), 1))
}

// BenchmarkUnavailableWindow: one node, download D, reboot R. Pre-staged,
// the download is outside the window; staged after the drain, inside it.
func BenchmarkUnavailableWindow(b *testing.B) {
	for _, mode := range []struct {
		name            string
		stageAfterDrain bool
	}{{"prestaged", false}, {"stage-after-drain", true}} {
		b.Run(mode.name, func(b *testing.B) {
			var all []time.Duration
			for range b.N {
				_, un := rollout(b, 1, 1, mode.stageAfterDrain)
				all = append(all, un...)
			}
			b.ReportMetric(mean(all).Seconds(), "s-unavailable/node")
			b.ReportMetric(0, "ns/op")
		})
	}
}

// BenchmarkRollout100: 100 nodes at maxUnavailable 10, pre-staged. The ideal
// makespan is ceil(N/M) waves of the mean per-node unavailable time.
func BenchmarkRollout100(b *testing.B) {
	const n, m = 100, 10
	for range b.N {
		makespan, un := rollout(b, n, m, false)
		perNode := mean(un)
		ideal := time.Duration(math.Ceil(float64(n)/float64(m))) * perNode
		b.ReportMetric(makespan.Seconds(), "s-makespan")
		b.ReportMetric(perNode.Seconds(), "s-unavailable/node")
		b.ReportMetric(ideal.Seconds(), "s-ideal")
		b.ReportMetric(makespan.Seconds()/ideal.Seconds(), "makespan/ideal")
		b.ReportMetric(0, "ns/op")
	}
}
