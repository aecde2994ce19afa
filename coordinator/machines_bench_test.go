package coordinator_test

import (
	"context"
	"fmt"
	"io"
	"log/slog"
	"regexp"
	"sync"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/dynamic"

	"github.com/nodeward/nodeward/api/v1alpha1"
	"github.com/nodeward/nodeward/coordinator"
	"github.com/nodeward/nodeward/test/cluster"
	"github.com/nodeward/nodeward/test/measure"
)

// BenchmarkMachineDeletionSeen splits the time from a Machine's deletion
// to its node counting as unavailable into its parts, on the real API
// server with OpenShift's Machine CRD (no Machine API controllers: the
// Machines carry a finalizer of the benchmark's, so a deleted one stays
// deleting, as behind another owner's pre-drain hook). Per sample, from the
// Delete call: watch, a plain watch of the Machines delivering the deletion
// (the floor); plan, the first plan pass of the pool whose unavailable
// nodes name the Machine (the coordinator's informer, machine index, queue
// and pass); status, a watch of the pool delivering the status that names
// it (the status write and its delivery). Every sample starts from a
// status quiet for 1.5 s: the coordinator writes a pool's status at most
// once a second (statuspace.go), which would add up to 1 s. Reported too,
// per sample: plan-minus-watch (nodeward's informer to its pass against
// the plain watch; negative when the coordinator's watch was the faster)
// and status-minus-plan (the status write and its delivery).
//
//	go test ./coordinator -run '^$' -bench MachineDeletionSeen -benchtime 20x
func BenchmarkMachineDeletionSeen(b *testing.B) {
	const prefix = "machbench"
	ctx := context.Background()
	cp, dyn := machineBenchSetup(ctx, b)
	nodes := cp.CreateNodes(b, cluster.NodeSpec{Prefix: prefix, Count: 3})
	if err := cluster.CreateAgentLeases(ctx, cp.Client(), nodes); err != nil {
		b.Fatal(err)
	}
	pool := &v1alpha1.UpdatePool{ObjectMeta: metav1.ObjectMeta{Name: prefix, Labels: map[string]string{suiteLabel: prefix}},
		Spec: v1alpha1.UpdatePoolSpec{NodeSelector: groupSelector(prefix), OSImage: "os:bench", Paused: true}}
	if err := cluster.CreatePool(ctx, dyn, pool); err != nil {
		b.Fatal(err)
	}
	planned, watched, status := measure.NewFirstSeen(), measure.NewFirstSeen(), measure.NewFirstSeen()
	statusAt := watchMachinesAndPool(ctx, b, dyn, prefix, watched, status)
	runBenchCoordinator(ctx, b, cp, dyn, prefix, func(pool string, unavailable map[string]string) {
		now := time.Now()
		for _, why := range unavailable {
			if m := deletingMachine.FindStringSubmatch(why); m != nil && pool == prefix {
				planned.Mark(m[1], now)
			}
		}
	})
	var watch, plan, stat, index, write []time.Duration
	for i := 0; b.Loop(); i++ {
		name := fmt.Sprintf("%s-%d", prefix, i)
		createHeldMachine(ctx, b, dyn, name, nodes[i%len(nodes)])
		cluster.WaitFor(b, time.Minute, "the pool's status quiet for 1.5 s", func(context.Context) (bool, error) {
			return time.Since(statusAt()) > 1500*time.Millisecond, nil
		})
		began := time.Now()
		if err := dyn.Resource(machinesGVR).Namespace(machineNS).Delete(ctx, name, metav1.DeleteOptions{}); err != nil {
			b.Fatal(err)
		}
		w, p, s := waitSeen(ctx, b, watched, name), waitSeen(ctx, b, planned, name), waitSeen(ctx, b, status, name)
		watch, plan, stat = append(watch, w.Sub(began)), append(plan, p.Sub(began)), append(stat, s.Sub(began))
		index, write = append(index, p.Sub(w)), append(write, s.Sub(p))
		dropHold(ctx, b, dyn, name)
	}
	b.ReportMetric(0, "ns/op")
	for _, r := range []struct {
		name    string
		samples []time.Duration
	}{{"watch", watch}, {"plan", plan}, {"status", stat}, {"plan-minus-watch", index}, {"status-minus-plan", write}} {
		measure.ReportQuantiles(b, r.name, r.samples)
	}
}

// deletingMachine finds the Machine in a node's reason for counting
// unavailable (machines.go's recordOf).
var deletingMachine = regexp.MustCompile(`machine ` + machineNS + `/(\S+) is being deleted`)

// machineBenchSetup is setup and installMachineAPI for a benchmark.
func machineBenchSetup(ctx context.Context, b *testing.B) (*cluster.ControlPlane, dynamic.Interface) {
	b.Helper()
	cp := env.ControlPlane(b)
	dyn, err := dynamic.NewForConfig(cp.Config())
	if err != nil {
		b.Fatal(err)
	}
	if err := cp.InstallCRDs(ctx); err != nil {
		b.Fatal(err)
	}
	if err := cp.InstallCRDFiles(ctx, "test/machineapi/crds/0000_10_machine-api_01_machines-Default.crd.yaml"); err != nil {
		b.Fatal(err)
	}
	_, err = cp.Client().CoreV1().Namespaces().Create(ctx, &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: machineNS}}, metav1.CreateOptions{})
	if err != nil && !apierrors.IsAlreadyExists(err) {
		b.Fatal(err)
	}
	return cp, dyn
}

// runBenchCoordinator runs a coordinator of suite's pools, its plan passes
// reported to planned, until the benchmark ends.
func runBenchCoordinator(ctx context.Context, b *testing.B, cp *cluster.ControlPlane, dyn dynamic.Interface, suite string,
	planned func(pool string, unavailable map[string]string)) {
	runCoordinator(ctx, b, cp, dyn, suite, func(o *coordinator.Config) {
		o.Log = slog.New(slog.NewTextHandler(io.Discard, nil))
		coordinator.SetTestHooks(o, nil, planned)
	})
}

// createHeldMachine creates a Running Machine linked to node, with the
// benchmark's finalizer, and removes it when the benchmark ends.
func createHeldMachine(ctx context.Context, b *testing.B, dyn dynamic.Interface, name, node string) {
	b.Helper()
	m := &unstructured.Unstructured{Object: map[string]any{
		"apiVersion": "machine.openshift.io/v1beta1", "kind": "Machine",
		"metadata": map[string]any{"name": name, "namespace": machineNS, "finalizers": []any{"nodeward.test/hold"},
			"labels": map[string]any{"machine.openshift.io/cluster-api-cluster": "test", "machine.openshift.io/cluster-api-machine-role": "worker"}},
		"spec": map[string]any{"providerSpec": map[string]any{"value": map[string]any{}}},
	}}
	api := dyn.Resource(machinesGVR).Namespace(machineNS)
	created, err := api.Create(ctx, m, metav1.CreateOptions{})
	if err != nil {
		b.Fatal(err)
	}
	b.Cleanup(func() { dropHold(context.Background(), b, dyn, name) })
	created.Object["status"] = map[string]any{"phase": "Running", "nodeRef": map[string]any{"kind": "Node", "name": node}}
	if _, err := api.UpdateStatus(ctx, created, metav1.UpdateOptions{}); err != nil {
		b.Fatal(err)
	}
}

// dropHold deletes a Machine and drops the benchmark's finalizer.
func dropHold(ctx context.Context, b *testing.B, dyn dynamic.Interface, name string) {
	api := dyn.Resource(machinesGVR).Namespace(machineNS)
	if err := api.Delete(ctx, name, metav1.DeleteOptions{}); err != nil && !apierrors.IsNotFound(err) {
		b.Errorf("delete Machine %s: %v", name, err)
	}
	_, err := api.Patch(ctx, name, types.MergePatchType, []byte(`{"metadata":{"finalizers":null}}`), metav1.PatchOptions{})
	if err != nil && !apierrors.IsNotFound(err) {
		b.Errorf("release Machine %s: %v", name, err)
	}
}

// watchMachinesAndPool watches the Machines and pool until the benchmark
// ends: when each Machine's deletion was first delivered (watched), when
// the pool's status first named each as being deleted (status), and when
// the pool last changed (statusAt).
func watchMachinesAndPool(ctx context.Context, b *testing.B, dyn dynamic.Interface, pool string, watched, status *measure.FirstSeen) (statusAt func() time.Time) {
	b.Helper()
	ctx, cancel := context.WithCancel(ctx)
	b.Cleanup(cancel)
	mw, err := dyn.Resource(machinesGVR).Namespace(machineNS).Watch(ctx, metav1.ListOptions{})
	if err != nil {
		b.Fatal(err)
	}
	pw, err := dyn.Resource(v1alpha1.UpdatePoolResource()).Watch(ctx, metav1.ListOptions{FieldSelector: "metadata.name=" + pool})
	if err != nil {
		b.Fatal(err)
	}
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
				for _, m := range deletingMachine.FindAllStringSubmatch(poolMessage(p, v1alpha1.PoolUpdating), -1) {
					status.Mark(m[1], now)
				}
			}
			mu.Lock()
			last = now
			mu.Unlock()
		}
	}()
	return func() time.Time {
		mu.Lock()
		defer mu.Unlock()
		return last
	}
}

// poolMessage is the message of a pool's condition typ.
func poolMessage(p *unstructured.Unstructured, typ string) string {
	conds, _, _ := unstructured.NestedSlice(p.Object, "status", "conditions")
	for _, c := range conds {
		if cond, _ := c.(map[string]any); cond["type"] == typ {
			msg, _ := cond["message"].(string)
			return msg
		}
	}
	return ""
}

// waitSeen is when key was first seen, failing b after 30 s.
func waitSeen(ctx context.Context, b *testing.B, seen *measure.FirstSeen, key string) time.Time {
	b.Helper()
	at, err := seen.Wait(ctx, key, 30*time.Second)
	if err != nil {
		b.Fatal(err)
	}
	return at
}
