package machineapi_test

import (
	"context"
	"fmt"
	"strconv"
	"testing"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/nodeward/nodeward/api/v1alpha1"
	"github.com/nodeward/nodeward/test/cluster"
	"github.com/nodeward/nodeward/test/coordinatortest"
	"github.com/nodeward/nodeward/test/machineapi"
)

// BenchmarkRolloutMakespan rolls os-2 out to the four nodes of a
// MachineSet under the real Machine API controllers and nodeward's
// coordinator (maxUnavailable 1; agents running the real update machine on
// simulated hosts, 3 s reboots), from the pool's creation until every node
// of the set is Done on os-2. deletions=1 deletes one Machine whose node
// waits for its turn once the first node is Done: the controllers drain
// and delete its node, the MachineSet replaces it, the replacement's agent
// starts, and the replacement is updated too. The parent logs the two
// mean makespans over every run and their ratio.
//
//	go test ./test/machineapi -run '^$' -bench RolloutMakespan -benchtime 1x -count 3
func BenchmarkRolloutMakespan(b *testing.B) {
	cp := env.ControlPlane(b)
	mapi := machineapi.Start(b, cp, machineapi.Options{})
	if err := cp.InstallCRDs(context.Background()); err != nil {
		b.Fatal(err)
	}
	// Totals over every -count run of each sub-benchmark: the parent runs
	// once, its sub-benchmarks count times.
	total, runs := map[bool]time.Duration{}, map[bool]int{}
	mean := func(deleteOne bool) time.Duration { return total[deleteOne] / time.Duration(max(runs[deleteOne], 1)) }
	for _, deleteOne := range []bool{false, true} {
		name := map[bool]string{false: "deletions=0", true: "deletions=1"}[deleteOne]
		b.Run(name, func(b *testing.B) {
			var sum time.Duration
			n := 0
			for b.Loop() {
				sum += rollout(b, cp, mapi, deleteOne)
				n++
			}
			total[deleteOne] += sum
			runs[deleteOne] += n
			b.ReportMetric((sum / time.Duration(n)).Seconds(), "makespan-s")
			b.ReportMetric(0, "ns/op")
		})
	}
	if runs[false] > 0 && runs[true] > 0 {
		b.Logf("mean makespan %.2f s without a deletion (%d runs), %.2f s with one (%d runs): ratio %.3f",
			mean(false).Seconds(), runs[false], mean(true).Seconds(), runs[true], float64(mean(true))/float64(mean(false)))
	}
}

// rollout runs one rollout on a fresh MachineSet of four and returns its
// makespan.
func rollout(b *testing.B, cp *cluster.ControlPlane, mapi *machineapi.Controllers, deleteOne bool) time.Duration {
	b.Helper()
	ctx := context.Background()
	set := "roll" + strconv.FormatInt(time.Now().UnixNano(), 36)
	mapi.CreateMachineSet(ctx, machineapi.MachineSetSpec{Name: set, Replicas: 4, Role: "worker"})
	agents := newAgentRunner(cp)
	defer agents.stop()
	for _, node := range setMachines(b, mapi, set, 4, 2*time.Minute) {
		agents.add(b, node)
	}
	stop := coordinatortest.Start(b, cp, coordinatortest.Options{Pools: set, Resync: time.Second})
	defer stop()
	began := time.Now()
	benchPool(b, cp, set, false)
	var deleted string
	var ended time.Time
	cluster.WaitFor(b, 5*time.Minute, "every node of "+set+" Done on os-2", func(ctx context.Context) (bool, error) {
		now := time.Now()
		done, waiting, err := rolloutState(ctx, b, cp, mapi, agents, set)
		if err != nil {
			return false, err
		}
		if deleteOne && deleted == "" && done == 1 && waiting != "" {
			mapi.DeleteMachine(ctx, waiting)
			deleted = waiting
			b.Logf("%s: Machine %s deleted %.1f s into the rollout, one node Done", set, waiting, now.Sub(began).Seconds())
			return false, nil
		}
		ended = now
		return done == 4 && (!deleteOne || deleted != ""), fmt.Errorf("%d of 4 Done", done)
	})
	return ended.Sub(began)
}

// rolloutState counts set's nodes Done on os-2 and names a Machine whose
// node waits for its turn (neither granted nor updating nor Done); it
// starts an agent on every node that has none (a replacement). It fails
// while a Machine is being deleted or has no running node.
func rolloutState(ctx context.Context, b *testing.B, cp *cluster.ControlPlane, mapi *machineapi.Controllers,
	agents *agentRunner, set string) (done int, waiting string, err error) {
	ms, err := mapi.Machines(ctx, machineapi.MachineSetSelector(set))
	if err != nil {
		return 0, "", err
	}
	for _, m := range ms {
		if m.DeletionTimestamp != nil || m.Phase != "Running" || m.NodeRef == "" {
			return 0, "", fmt.Errorf("machine %s: phase %q, node %q, deleting %v", m.Name, m.Phase, m.NodeRef, m.DeletionTimestamp != nil)
		}
		agents.add(b, m.NodeRef)
		n, err := cp.Client().CoreV1().Nodes().Get(ctx, m.NodeRef, metav1.GetOptions{})
		if err != nil {
			return 0, "", err
		}
		state := v1alpha1.Step(n.Annotations[v1alpha1.AnnotationState])
		switch {
		case state == v1alpha1.StepDone && n.Annotations[v1alpha1.AnnotationStateTarget] == "os-2":
			done++
		case n.Annotations[v1alpha1.AnnotationGrant] == "" && !state.HoldsSlot():
			waiting = m.Name
		}
	}
	if len(ms) != 4 {
		return done, waiting, fmt.Errorf("%d Machines", len(ms))
	}
	return done, waiting, nil
}
