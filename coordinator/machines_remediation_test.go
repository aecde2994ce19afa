package coordinator_test

import (
	"context"
	"testing"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/client-go/dynamic"
	"k8s.io/utils/ptr"

	"github.com/nodeward/nodeward/api/v1alpha1"
	"github.com/nodeward/nodeward/coordinator"
	"github.com/nodeward/nodeward/test/cluster"
)

var healthChecksGVR = schema.GroupVersionResource{Group: "machine.openshift.io", Version: "v1beta1", Resource: "machinehealthchecks"}

// createHealthCheck creates a MachineHealthCheck selecting Machines by
// role, paused with the given value when paused is not nil.
func createHealthCheck(ctx context.Context, t *testing.T, dyn dynamic.Interface, name, role string, paused *string) {
	t.Helper()
	h := &unstructured.Unstructured{Object: map[string]any{
		"apiVersion": "machine.openshift.io/v1beta1", "kind": "MachineHealthCheck",
		"metadata": map[string]any{"name": name, "namespace": machineNS},
		"spec": map[string]any{
			"selector":            map[string]any{"matchLabels": map[string]any{"machine.openshift.io/cluster-api-machine-role": role}},
			"unhealthyConditions": []any{map[string]any{"type": "Ready", "status": "Unknown", "timeout": "2s"}},
		},
	}}
	if paused != nil {
		h.SetAnnotations(map[string]string{coordinator.PausedAnnotation: *paused})
	}
	api := dyn.Resource(healthChecksGVR).Namespace(machineNS)
	if _, err := api.Create(ctx, h, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = api.Delete(context.Background(), name, metav1.DeleteOptions{}) })
}

// healthCheckPaused is the value of a health check's pause and whether it
// has one.
func healthCheckPaused(ctx context.Context, t *testing.T, dyn dynamic.Interface, name string) (string, bool) {
	t.Helper()
	h, err := dyn.Resource(healthChecksGVR).Namespace(machineNS).Get(ctx, name, metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	v, ok := h.GetAnnotations()[coordinator.PausedAnnotation]
	return v, ok
}

// TestUpdatePausesTheHealthChecksJudgingItsMachine: from before a node's
// grant until its update ends, the MachineHealthChecks that judge its
// Machine are paused with nodeward's value, and resumed after; one paused
// by an operator stays paused, one judging other Machines is untouched.
func TestUpdatePausesTheHealthChecksJudgingItsMachine(t *testing.T) {
	const prefix = "machine-mhc"
	r := newRig(t, prefix, 1, 1)
	installMachineAPI(r.ctx, t, r.cp)
	if err := r.cp.InstallCRDFiles(r.ctx, "test/machineapi/crds/0000_10_machine-api_01_machinehealthchecks.crd.yaml"); err != nil {
		t.Fatal(err)
	}
	createMachine(r.ctx, t, r.dyn, prefix+"-m0", "worker", r.nodes[0], "Running", false)
	createHealthCheck(r.ctx, t, r.dyn, prefix+"-judge", "worker", nil)
	createHealthCheck(r.ctx, t, r.dyn, prefix+"-operator", "worker", ptr.To(""))
	createHealthCheck(r.ctx, t, r.dyn, prefix+"-infra", "infra", nil)
	createPool(t, r.dyn, prefix, &v1alpha1.UpdatePool{ObjectMeta: metav1.ObjectMeta{Name: prefix}, Spec: v1alpha1.UpdatePoolSpec{
		NodeSelector: groupSelector(prefix), OSImage: "os:mhc1", MaxUnavailable: ptr.To(intstrPercent("100%")),
	}})
	runCoordinator(r.ctx, t, r.cp, r.dyn, prefix)
	g := r.agents.next(t, 30*time.Second)
	if v, ok := healthCheckPaused(r.ctx, t, r.dyn, prefix+"-judge"); !ok || v != coordinator.RemediationHoldValue {
		t.Fatalf("%s granted with its Machine's health check paused %v (%q); want nodeward's pause", g.node, ok, v)
	}
	if _, ok := healthCheckPaused(r.ctx, t, r.dyn, prefix+"-infra"); ok {
		t.Fatal("a health check judging no Machine of the node was paused")
	}
	r.agents.mustReport(r.ctx, t, g, v1alpha1.StepRebooting)
	holdsFor(t, 3*time.Second, "the health check paused while the node reboots", func() bool {
		v, ok := healthCheckPaused(r.ctx, t, r.dyn, prefix+"-judge")
		return ok && v == coordinator.RemediationHoldValue
	})
	r.agents.mustReport(r.ctx, t, g, v1alpha1.StepDone)
	cluster.WaitFor(t, 30*time.Second, "the health check resumed once the update ended", func(ctx context.Context) (bool, error) {
		_, ok := healthCheckPaused(ctx, t, r.dyn, prefix+"-judge")
		return !ok, nil
	})
	if v, ok := healthCheckPaused(r.ctx, t, r.dyn, prefix+"-operator"); !ok || v != "" {
		t.Fatalf("the operator's pause became %v (%q); it is not nodeward's to lift", ok, v)
	}
}
