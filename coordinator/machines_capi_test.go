package coordinator_test

import (
	"context"
	"testing"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/dynamic"
	"k8s.io/utils/ptr"

	"github.com/nodeward/nodeward/api/v1alpha1"
	"github.com/nodeward/nodeward/coordinator"
	"github.com/nodeward/nodeward/test/cluster"
)

var capiMachines = schema.GroupVersionResource{Group: "cluster.x-k8s.io", Version: "v1beta2", Resource: "machines"}

// createCAPIMachine creates a Cluster API Machine of node (status.nodeRef,
// phase Running), held by a finalizer of the test's.
func createCAPIMachine(ctx context.Context, t *testing.T, dyn dynamic.Interface, name, node string) {
	t.Helper()
	m := &unstructured.Unstructured{Object: map[string]any{
		"apiVersion": "cluster.x-k8s.io/v1beta2", "kind": "Machine",
		"metadata": map[string]any{"name": name, "namespace": machineNS, "finalizers": []any{"nodeward.test/hold"}},
		"spec": map[string]any{"clusterName": "test",
			"bootstrap":         map[string]any{"dataSecretName": "bootstrap"},
			"infrastructureRef": map[string]any{"apiGroup": "infrastructure.cluster.x-k8s.io", "kind": "TestMachine", "name": name}},
	}}
	api := dyn.Resource(capiMachines).Namespace(machineNS)
	created, err := api.Create(ctx, m, metav1.CreateOptions{})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		ctx := context.Background()
		_ = api.Delete(ctx, name, metav1.DeleteOptions{})
		_, _ = api.Patch(ctx, name, types.MergePatchType, []byte(`{"metadata":{"finalizers":null}}`), metav1.PatchOptions{})
	})
	created.Object["status"] = map[string]any{"phase": "Running", "nodeRef": map[string]any{"name": node}}
	if _, err := api.UpdateStatus(ctx, created, metav1.UpdateOptions{}); err != nil {
		t.Fatal(err)
	}
}

// TestClusterAPIMachines: with Cluster API's Machine CRD served (v1beta2),
// an update holds the Machine's pre-drain hook annotation and keeps its
// health check from remediating it (skip-remediation) until it ends, and a
// node whose Machine is being deleted counts as unavailable.
func TestClusterAPIMachines(t *testing.T) {
	const prefix = "capi"
	r := newRig(t, prefix, 2, 1)
	installMachineAPI(r.ctx, t, r.cp)
	if err := r.cp.InstallCRDFiles(r.ctx, "test/machineapi/clusterapi/cluster.x-k8s.io_machines.yaml"); err != nil {
		t.Fatal(err)
	}
	createCAPIMachine(r.ctx, t, r.dyn, prefix+"-m0", r.nodes[0])
	createCAPIMachine(r.ctx, t, r.dyn, prefix+"-m1", r.nodes[1])
	api := r.dyn.Resource(capiMachines).Namespace(machineNS)
	// The second node's Machine is being deleted: it holds the pool's one
	// slot, and the first node waits.
	if err := api.Delete(r.ctx, prefix+"-m1", metav1.DeleteOptions{}); err != nil {
		t.Fatal(err)
	}
	createPool(t, r.dyn, prefix, &v1alpha1.UpdatePool{ObjectMeta: metav1.ObjectMeta{Name: prefix}, Spec: v1alpha1.UpdatePoolSpec{
		NodeSelector: groupSelector(prefix), OSImage: "os:ca1", MaxUnavailable: ptr.To(intstrPercent("50%")),
	}})
	runCoordinator(r.ctx, t, r.cp, r.dyn, prefix)
	waitPoolCondition(t, r.dyn, prefix, v1alpha1.PoolUpdating, 30*time.Second, "machine "+machineNS+"/"+prefix+"-m1 is being deleted")
	noGrantBut(r.ctx, t, r.cp, r.nodes, "", "while a Cluster API Machine of the pool is being deleted")
	if _, err := api.Patch(r.ctx, prefix+"-m1", types.MergePatchType, []byte(`{"metadata":{"finalizers":null}}`), metav1.PatchOptions{}); err != nil {
		t.Fatal(err)
	}
	g := r.agents.next(t, 30*time.Second)
	if g.node != r.nodes[0] {
		t.Fatalf("granted %s, want %s", g.node, r.nodes[0])
	}
	hooked := func(ctx context.Context) bool {
		m, err := api.Get(ctx, prefix+"-m0", metav1.GetOptions{})
		if err != nil {
			t.Fatal(err)
		}
		_, ok := m.GetAnnotations()[coordinator.ClusterAPIHookAnnotation]
		return ok
	}
	if !hooked(r.ctx) {
		t.Fatalf("granted %s without the pre-drain hook annotation on its Machine", g.node)
	}
	skipped := func(ctx context.Context) bool {
		m, err := api.Get(ctx, prefix+"-m0", metav1.GetOptions{})
		if err != nil {
			t.Fatal(err)
		}
		return m.GetAnnotations()[coordinator.SkipRemediationAnnotation] == coordinator.RemediationHoldValue
	}
	if !skipped(r.ctx) {
		t.Fatalf("granted %s without its Machine marked to skip remediation", g.node)
	}
	r.agents.mustReport(r.ctx, t, g, v1alpha1.StepDone)
	cluster.WaitFor(t, 30*time.Second, "the hook and the skip-remediation annotations dropped once the update ended", func(ctx context.Context) (bool, error) {
		return !hooked(ctx) && !skipped(ctx), nil
	})
}
