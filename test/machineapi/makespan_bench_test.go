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
	"github.com/nodeward/nodeward/test/sim"
)

// BenchmarkRolloutMakespan rolls os-2 out to the four nodes of a
// MachineSet under the real Machine API controllers and nodeward's
// coordinator (maxUnavailable 1; agents running the real update machine on
// simulated hosts, 3 s reboots), from the pool's creation until every node
// of the set is Done on os-2. Once the first node is Done, deleted=waiting
// deletes the Machine of a node still waiting for its turn, and
// deleted=updating the Machine of the node being updated (nodeward's hook
// holds its drain until the update is Done): the controllers drain and
// delete the node, the MachineSet replaces it, the replacement's agent
// starts, and the replacement is updated too. The parent logs the mean
// makespans over every run and their ratios to deleted=none's.
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
	victims := []string{"none", "waiting", "updating"}
	total, runs := map[string]time.Duration{}, map[string]int{}
	for _, victim := range victims {
		b.Run("deleted="+victim, func(b *testing.B) {
			var sum time.Duration
			n := 0
			for b.Loop() {
				sum += rollout(b, cp, mapi, victim)
				n++
			}
			total[victim] += sum
			runs[victim] += n
			b.ReportMetric((sum / time.Duration(n)).Seconds(), "makespan-s")
			b.ReportMetric(0, "ns/op")
		})
	}
	mean := func(victim string) time.Duration { return total[victim] / time.Duration(max(runs[victim], 1)) }
	for _, victim := range victims {
		if runs[victim] == 0 || runs["none"] == 0 {
			continue // not selected by -bench
		}
		b.Logf("deleted=%s: mean makespan %.2f s over %d runs, %.3f × deleted=none's",
			victim, mean(victim).Seconds(), runs[victim], float64(mean(victim))/float64(mean("none")))
	}
}

// rollout runs one rollout on a fresh MachineSet of four and returns its
// makespan; victim says whose Machine is deleted once a node is Done:
// "none", "waiting" or "updating".
func rollout(b *testing.B, cp *cluster.ControlPlane, mapi *machineapi.Controllers, victim string) time.Duration {
	b.Helper()
	ctx := context.Background()
	set := "roll" + strconv.FormatInt(time.Now().UnixNano(), 36)
	mapi.CreateMachineSet(ctx, machineapi.MachineSetSpec{Name: set, Replicas: 4, Role: "worker"})
	agents := newAgentRunner(cp, func(*sim.SimNode) {})
	defer agents.stop()
	for _, node := range waitMachineSet(b, cp, mapi, set, 2*time.Minute, 4) {
		agents.addWithLease(b, node)
	}
	stop := coordinatortest.Start(b, cp, coordinatortest.Options{Pools: set, Resync: time.Second})
	defer stop()
	began := time.Now()
	createPool(b, cp, set)
	deleted := victim == "none"
	var ended, settled time.Time
	cluster.WaitFor(b, 5*time.Minute, "every node of "+set+" Done on os-2", func(ctx context.Context) (bool, error) {
		now := time.Now()
		st, err := rolloutState(ctx, b, cp, mapi, agents, set)
		if err != nil {
			return false, err
		}
		if victim != "none" && deleted && settled.IsZero() {
			// The deleted Machine is gone, its replacement linked.
			settled = now
			b.Logf("%s: %.1f s in, the deleted Machine gone and its replacement running, %d nodes Done", set, now.Sub(began).Seconds(), st.done)
		}
		if m := map[string]string{"waiting": st.waiting, "updating": st.updating}[victim]; !deleted && st.done == 1 && m != "" {
			mapi.DeleteMachine(ctx, m)
			deleted = true
			b.Logf("%s: Machine %s (%s) deleted %.1f s into the rollout, one node Done", set, m, victim, now.Sub(began).Seconds())
			return false, nil
		}
		ended = now
		return st.done == 4 && deleted, fmt.Errorf("%d of 4 Done", st.done)
	})
	return ended.Sub(began)
}

// setState is what rolloutState found of a MachineSet's nodes: how many
// are Done on os-2, and a Machine whose node waits for its turn (neither
// granted nor updating nor Done) and one whose node is being updated.
type setState struct {
	done              int
	waiting, updating string
}

// rolloutState reads set's Machines and nodes; it starts an agent on every
// node that has none (a replacement). It fails while a Machine is being
// deleted or has no running node.
func rolloutState(ctx context.Context, b *testing.B, cp *cluster.ControlPlane, mapi *machineapi.Controllers,
	agents *agentRunner, set string) (setState, error) {
	var st setState
	ms, err := mapi.Machines(ctx, machineapi.MachineSetSelector(set))
	if err != nil {
		return st, err
	}
	for _, m := range ms {
		if m.DeletionTimestamp != nil || m.Phase != "Running" || m.NodeRef == "" {
			return st, fmt.Errorf("machine %s: phase %q, node %q, deleting %v", m.Name, m.Phase, m.NodeRef, m.DeletionTimestamp != nil)
		}
		agents.addWithLease(b, m.NodeRef)
		n, err := cp.Client().CoreV1().Nodes().Get(ctx, m.NodeRef, metav1.GetOptions{})
		if err != nil {
			return st, err
		}
		state := v1alpha1.Step(n.Annotations[v1alpha1.AnnotationState])
		switch {
		case state == v1alpha1.StepDone && n.Annotations[v1alpha1.AnnotationStateTarget] == "os-2":
			st.done++
		case n.Annotations[v1alpha1.AnnotationGrant] == "" && !state.HoldsSlot():
			st.waiting = m.Name
		case state.HoldsSlot():
			st.updating = m.Name
		}
	}
	if len(ms) != 4 {
		return st, fmt.Errorf("%d Machines", len(ms))
	}
	return st, nil
}
