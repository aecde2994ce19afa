package machineapi_test

import (
	"context"
	"regexp"
	"slices"
	"sync"
	"testing"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"

	"github.com/nodeward/nodeward/api/v1alpha1"
	"github.com/nodeward/nodeward/test/cluster"
	"github.com/nodeward/nodeward/test/coordinatortest"
	"github.com/nodeward/nodeward/test/machineapi"
	"github.com/nodeward/nodeward/test/measure"
)

// benchHold is another owner's pre-drain hook on every Machine of the
// benchmark: a deleted Machine stays Deleting, its node in place, until the
// benchmark lets it go.
var benchHold = machineapi.Hook{Name: "bench.nodeward.test/Hold", Owner: "nodeward-benchmark"}

// BenchmarkMachineDeletionToUnavailable measures, under the real Machine
// API controllers, how long after a Machine's deletion nodeward's
// coordinator counts its node unavailable: the pool's status (its Updating
// condition) names the Machine as being deleted, its status quiet before
// (the coordinator paces status writes to one a second). The floor is the API
// server's own watch of the Machines, in the same run: when a plain watch
// delivers the deletion. The pool is paused (nothing granted, the agents
// need not run); its three nodes' Machines belong to a MachineSet, each
// with benchHold, so a deletion stays Deleting while measured; then the
// hook is dropped, the controllers drain and delete the node, and the
// MachineSet replaces it before the next sample. The metrics: watch (the
// floor), pool (the status), pool-minus-watch (nodeward's own part).
//
//	go test ./test/machineapi -run '^$' -bench MachineDeletionToUnavailable -benchtime 20x
func BenchmarkMachineDeletionToUnavailable(b *testing.B) {
	cp := env.ControlPlane(b)
	mapi := machineapi.Start(b, cp, machineapi.Options{})
	ctx := context.Background()
	if err := cp.InstallCRDs(ctx); err != nil {
		b.Fatal(err)
	}
	const set = "figdel"
	mapi.CreateMachineSet(ctx, machineapi.MachineSetSpec{Name: set, Replicas: 3, Role: "worker",
		PreDrainHooks: []machineapi.Hook{benchHold}})
	waitMachineSet(b, cp, mapi, set, 2*time.Minute, 3)
	createPoolPaused(b, cp, set, true)
	coordinatortest.Start(b, cp, coordinatortest.Options{Pools: set, Resync: time.Second})
	watched, pooled, statusAt := watchDeletions(b, mapi, set)
	waitPoolNames(b, mapi, set, "agent liveness Lease expired or missing")
	var watch, pool, own []time.Duration
	for b.Loop() {
		victim := firstOf(waitMachineSet(b, cp, mapi, set, 2*time.Minute, 3))
		// The coordinator writes a pool's status at most once a second
		// (coordinator/statuspace.go): measured from a quiet status, a
		// sample is the event path alone, not the pacing.
		cluster.WaitFor(b, time.Minute, "the pool's status quiet for 1.5 s", func(context.Context) (bool, error) {
			return time.Since(statusAt()) > 1500*time.Millisecond, nil
		})
		began := time.Now()
		mapi.DeleteMachine(ctx, victim)
		w, err := watched.Wait(ctx, victim, 30*time.Second)
		if err != nil {
			b.Fatalf("the Machines' watch: %v", err)
		}
		p, err := pooled.Wait(ctx, victim, 30*time.Second)
		if err != nil {
			b.Fatalf("the pool's status: %v", err)
		}
		watch, pool, own = append(watch, w.Sub(began)), append(pool, p.Sub(began)), append(own, p.Sub(w))
		mapi.SetLifecycleHooks(ctx, victim, nil, nil)
	}
	// The loop's time is mostly the replacements': the quantiles are the
	// figures.
	b.ReportMetric(0, "ns/op")
	measure.ReportQuantiles(b, "watch", watch)
	measure.ReportQuantiles(b, "pool", pool)
	measure.ReportQuantiles(b, "pool-minus-watch", own)
	b.ReportMetric(float64(measure.Quantile(pool, 0.5))/float64(measure.Quantile(watch, 0.5)), "pool/watch-p50")
}

func firstOf(m map[string]string) string {
	keys := make([]string, 0, len(m))
	for k := range m {
		keys = append(keys, k)
	}
	slices.Sort(keys)
	return keys[0]
}

// deletingInStatus finds the Machines a pool's Updating condition names as
// being deleted.
var deletingInStatus = regexp.MustCompile(`machine ` + machineapi.Namespace + `/(\S+) is being deleted`)

// watchDeletions watches set's Machines and its pool until the benchmark
// ends: when each Machine's deletion was first delivered, when the pool's
// status first named it, and (statusAt) when the pool last changed.
func watchDeletions(b *testing.B, mapi *machineapi.Controllers, set string) (watched, pooled *measure.FirstSeen, statusAt func() time.Time) {
	b.Helper()
	ctx, cancel := context.WithCancel(context.Background())
	b.Cleanup(cancel)
	mw, err := mapi.Dynamic.Resource(machineapi.MachineResource).Namespace(machineapi.Namespace).Watch(ctx,
		metav1.ListOptions{LabelSelector: machineapi.MachineSetSelector(set)})
	if err != nil {
		b.Fatal(err)
	}
	pw, err := mapi.Dynamic.Resource(v1alpha1.UpdatePoolResource()).Watch(ctx, metav1.ListOptions{FieldSelector: "metadata.name=" + set})
	if err != nil {
		b.Fatal(err)
	}
	watched, pooled = measure.NewFirstSeen(), measure.NewFirstSeen()
	go func() {
		for ev := range mw.ResultChan() {
			if m, ok := ev.Object.(*unstructured.Unstructured); ok && m.GetDeletionTimestamp() != nil {
				watched.Mark(m.GetName(), time.Now())
			}
		}
	}()
	var mu sync.Mutex
	var last time.Time
	go func() {
		for ev := range pw.ResultChan() {
			now := time.Now()
			if p, ok := ev.Object.(*unstructured.Unstructured); ok {
				for _, m := range deletingInStatus.FindAllStringSubmatch(poolUpdatingMessage(p), -1) {
					pooled.Mark(m[1], now)
				}
			}
			mu.Lock()
			last = now
			mu.Unlock()
		}
	}()
	return watched, pooled, func() time.Time {
		mu.Lock()
		defer mu.Unlock()
		return last
	}
}
