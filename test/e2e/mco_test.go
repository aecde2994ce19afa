package e2e

import (
	"context"
	"os"
	"testing"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/client-go/dynamic"
	"sigs.k8s.io/yaml"

	"github.com/nodeward/nodeward/daemon/mco"
	"github.com/nodeward/nodeward/daemon"
	"github.com/nodeward/nodeward/test/cluster"
	"github.com/nodeward/nodeward/test/sim"
)

// TestMCOMode: with the MachineConfig CRD of github.com/openshift/api and
// the machine-config-daemon's node annotations, the test plays the MCO node
// controller: it points one node's desiredConfig at a new rendered config.
// That node's agent updates to the config's osImageURL and kernel
// arguments, reports Working then Done and sets currentConfig; the other
// node is left alone.
func TestMCOMode(t *testing.T) {
	t.Parallel()
	cp := env.ControlPlane(t)
	dyn, err := dynamic.NewForConfig(cp.Config())
	if err != nil {
		t.Fatal(err)
	}
	installMachineConfigCRD(t, dyn)
	for name, spec := range map[string]map[string]any{
		"rendered-mco-1": {"osImageURL": "quay.io/openshift/os@sha256:1111"},
		"rendered-mco-2": {"osImageURL": "quay.io/openshift/os@sha256:2222", "kernelArguments": []any{"nodeward.test=1"}},
	} {
		mc := &unstructured.Unstructured{Object: map[string]any{
			"apiVersion": "machineconfiguration.openshift.io/v1", "kind": "MachineConfig",
			"metadata": map[string]any{"name": name}, "spec": spec,
		}}
		if _, err := dyn.Resource(mco.MachineConfigResource).Create(context.Background(), mc, metav1.CreateOptions{}); err != nil {
			t.Fatalf("create MachineConfig %s: %v", name, err)
		}
		t.Cleanup(func() {
			_ = dyn.Resource(mco.MachineConfigResource).Delete(context.Background(), name, metav1.DeleteOptions{})
		})
	}
	p := newPool(t, "mco", poolOptions{count: 2,
		spec: cluster.NodeSpec{Annotations: map[string]string{
			mco.AnnotationCurrentConfig: "rendered-mco-1", mco.AnnotationDesiredConfig: "rendered-mco-1"}},
		tune: func(n *sim.SimNode) {
			n.Host = sim.NewSimHost("quay.io/openshift/os@sha256:1111")
			n.RebootDelay = time.Second // long enough to see Working
			n.Tune = func(c *daemon.Config) { c.Update.Protocol = "mco" }
		}})
	p.startAgents()
	for _, name := range p.names {
		p.waitAnnotation(name, mco.AnnotationState, mco.StateDone)
	}
	updated, other := p.names[0], p.names[1]
	patchNode(t, p, updated, map[string]any{"metadata": map[string]any{"annotations": map[string]any{
		mco.AnnotationDesiredConfig: "rendered-mco-2"}}})
	p.waitAnnotation(updated, mco.AnnotationState, mco.StateWorking)
	p.waitAnnotation(updated, mco.AnnotationCurrentConfig, "rendered-mco-2")
	p.waitAnnotation(updated, mco.AnnotationState, mco.StateDone)

	host := p.nodes[updated].Host
	booted, _ := host.Booted(context.Background())
	n, err := p.node(context.Background(), updated)
	if err != nil {
		t.Fatal(err)
	}
	if booted != "quay.io/openshift/os@sha256:2222 nodeward.test=1" || host.Reboots() != 1 || n.Spec.Unschedulable {
		t.Fatalf("%s: booted %q after %d reboots, unschedulable %v", updated, booted, host.Reboots(), n.Spec.Unschedulable)
	}
	if o := p.nodes[other].Host; o.Reboots() != 0 {
		t.Fatalf("%s rebooted without a new desiredConfig", other)
	}
}

func installMachineConfigCRD(t *testing.T, dyn dynamic.Interface) {
	t.Helper()
	data, err := os.ReadFile("testdata/machineconfig.crd.yaml")
	if err != nil {
		t.Fatal(err)
	}
	var obj map[string]any
	if err := yaml.Unmarshal(data, &obj); err != nil {
		t.Fatal(err)
	}
	crds := schema.GroupVersionResource{Group: "apiextensions.k8s.io", Version: "v1", Resource: "customresourcedefinitions"}
	if _, err := dyn.Resource(crds).Create(context.Background(), &unstructured.Unstructured{Object: obj}, metav1.CreateOptions{}); err != nil {
		t.Fatalf("install MachineConfig CRD: %v", err)
	}
	cluster.WaitFor(t, 30*time.Second, "MachineConfig CRD served", func(ctx context.Context) (bool, error) {
		_, err := dyn.Resource(mco.MachineConfigResource).List(ctx, metav1.ListOptions{})
		return err == nil, err
	})
}

// waitAnnotation waits until node carries key=value.
func (p *pool) waitAnnotation(name, key, value string) {
	p.t.Helper()
	cluster.WaitFor(p.t, time.Minute, name+" "+key+"="+value, func(ctx context.Context) (bool, error) {
		n, err := p.node(ctx, name)
		return err == nil && n.Annotations[key] == value, err
	})
}
