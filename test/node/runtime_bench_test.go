package node_test

import (
	"context"
	"fmt"
	"math/rand/v2"
	"slices"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/wait"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/util/retry"

	"github.com/nodeward/nodeward/test/cluster"
	"github.com/nodeward/nodeward/test/measure"
	"github.com/nodeward/nodeward/test/node"
)

// hostAgentPollInterval is the runtime probe's poll interval in
// startHostAgent's configuration (one bad sample turns the condition
// True): the ideal detection time is half of it on average, one at worst.
const hostAgentPollInterval = time.Second

// BenchmarkRuntimeDownCondition measures, on each runtime's node, how long
// the runtime condition takes to follow the runtime: from the runtime's
// process gone (StopRuntime returned) to NodewardRuntimeUnavailable True on
// the Node, and from the runtime answering again (StartRuntime returned) to
// False. One stop and start per iteration, under a host agent with the
// runtime probe alone (startHostAgent); the Node is read every 20 ms. Each
// stop comes at a random phase of the probe's poll interval. It
// reports p50 and p99 of each, in ms, and the p50 of going down over the
// probe's poll interval. docs/benchmarks.md has the figures and the command.
func BenchmarkRuntimeDownCondition(b *testing.B) {
	b.Run("containerd", func(b *testing.B) {
		cp, n := env.Node(b)
		benchRuntimeDown(b, cp, n)
	})
	b.Run("crio", func(b *testing.B) {
		cp, n := env.CRIONode(b)
		benchRuntimeDown(b, cp, n)
	})
}

func benchRuntimeDown(b *testing.B, cp *cluster.ControlPlane, n *node.Node) {
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Minute)
	defer cancel()
	client := cp.Client()
	// An earlier run's agent left the condition False: without it, the
	// wait below would pass before this agent has seen the runtime (and
	// a runtime stopped before it was seen is Unknown, not True).
	if err := dropCondition(ctx, client, n.Name(), runtimeUnavailable); err != nil {
		b.Fatal(err)
	}
	agent := startHostAgent(b, cp, n)
	defer agent.Stop(10 * time.Second)
	up := conditionIs(runtimeUnavailable, corev1.ConditionFalse)
	if err := waitNode(ctx, client, n.Name(), 2*time.Minute, up); err != nil {
		b.Fatalf("the agent never found %s: %v (agent log %s)", n.Runtime(), err, agent.LogPath())
	}
	var down, back []time.Duration
	// The condition clears at a sample, and the loop sees that at once, so
	// a stop right after it would land just after a sample every time and
	// wait out nearly a whole poll interval: a uniform random phase before
	// each stop measures the probe, not the loop's lock-step with it.
	phase := rand.New(rand.NewPCG(uint64(time.Now().UnixNano()), 0))
	b.ResetTimer()
	for range b.N {
		if err := pause(ctx, time.Duration(phase.Int64N(int64(hostAgentPollInterval)))); err != nil {
			b.Fatal(err)
		}
		n.StopRuntime()
		d, err := timeUntil(ctx, client, n.Name(), conditionIs(runtimeUnavailable, corev1.ConditionTrue))
		if err != nil {
			b.Fatalf("with %s stopped: %v", n.Runtime(), err)
		}
		if err := n.StartRuntime(ctx); err != nil {
			b.Fatal(err)
		}
		u, err := timeUntil(ctx, client, n.Name(), up)
		if err != nil {
			b.Fatalf("%s is back: %v", n.Runtime(), err)
		}
		down, back = append(down, d), append(back, u)
	}
	b.StopTimer()
	measure.ReportQuantiles(b, "down", down)
	measure.ReportQuantiles(b, "up", back)
	b.ReportMetric(float64(measure.Quantile(down, 0.5))/float64(hostAgentPollInterval), "down-p50/poll")
	b.Logf("%s, %d stops: down %v; up %v", n.Runtime(), len(down), down, back)
}

// pause waits d, the random phase of a stop; it is the experiment's
// design, not a wait for a condition.
func pause(ctx context.Context, d time.Duration) error {
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-ctx.Done():
		return ctx.Err()
	case <-t.C:
		return nil
	}
}

// dropCondition removes a condition from the Node's status, retrying on
// conflicts with the kubelet's own status updates.
func dropCondition(ctx context.Context, client kubernetes.Interface, name string, cond corev1.NodeConditionType) error {
	err := retry.RetryOnConflict(retry.DefaultRetry, func() error {
		n, err := client.CoreV1().Nodes().Get(ctx, name, metav1.GetOptions{})
		if err != nil {
			return err
		}
		n.Status.Conditions = slices.DeleteFunc(n.Status.Conditions, func(c corev1.NodeCondition) bool { return c.Type == cond })
		_, err = client.CoreV1().Nodes().UpdateStatus(ctx, n, metav1.UpdateOptions{})
		return err
	})
	if err != nil {
		return fmt.Errorf("drop %s from node %s: %w", cond, name, err)
	}
	return nil
}

// timeUntil is how long, from now, until check accepts the Node, read
// every 20 ms; a minute at most.
func timeUntil(ctx context.Context, client kubernetes.Interface, name string, check func(*corev1.Node) error) (time.Duration, error) {
	start := time.Now()
	var last error
	err := wait.PollUntilContextTimeout(ctx, 20*time.Millisecond, time.Minute, true, func(ctx context.Context) (bool, error) {
		n, err := client.CoreV1().Nodes().Get(ctx, name, metav1.GetOptions{})
		if err != nil {
			last = err
			return false, nil
		}
		last = check(n)
		return last == nil, nil
	})
	if err != nil {
		return 0, fmt.Errorf("%w; last: %v", err, last)
	}
	return time.Since(start), nil
}
