package coordinator_test

import (
	"context"
	"fmt"
	"slices"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/dynamic"
	"k8s.io/utils/ptr"

	"github.com/nodeward/nodeward/api/v1alpha1"
	"github.com/nodeward/nodeward/test/cluster"
)

var machinesGVR = schema.GroupVersionResource{Group: "machine.openshift.io", Version: "v1beta1", Resource: "machines"}

const machineNS = "openshift-machine-api"

// installMachineAPI installs OpenShift's Machine CRD and its namespace.
// The tests that create Machines do not run in parallel, and remove their
// Machines: every coordinator started after the CRD reads them all.
func installMachineAPI(ctx context.Context, t *testing.T, cp *cluster.ControlPlane) {
	t.Helper()
	if err := cp.InstallCRDFiles(ctx, "test/machineapi/crds/0000_10_machine-api_01_machines-Default.crd.yaml"); err != nil {
		t.Fatal(err)
	}
	_, err := cp.Client().CoreV1().Namespaces().Create(ctx, &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: machineNS}}, metav1.CreateOptions{})
	if err != nil && !apierrors.IsAlreadyExists(err) {
		t.Fatal(err)
	}
}

// createMachine creates a Machine with role, linked to node when it is not
// "" (status.nodeRef, as the nodelink controller sets it), in phase, with a
// finalizer of the test's when held: a deletion then leaves it deleting.
func createMachine(ctx context.Context, t *testing.T, dyn dynamic.Interface, name, role, node, phase string, held bool) {
	t.Helper()
	m := &unstructured.Unstructured{Object: map[string]any{
		"apiVersion": "machine.openshift.io/v1beta1", "kind": "Machine",
		"metadata": map[string]any{"name": name, "namespace": machineNS, "labels": map[string]any{
			"machine.openshift.io/cluster-api-cluster": "test", "machine.openshift.io/cluster-api-machine-role": role}},
		"spec": map[string]any{"providerSpec": map[string]any{"value": map[string]any{}}},
	}}
	if held {
		m.SetFinalizers([]string{"nodeward.test/hold"})
	}
	api := dyn.Resource(machinesGVR).Namespace(machineNS)
	created, err := api.Create(ctx, m, metav1.CreateOptions{})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { releaseMachine(context.Background(), t, dyn, name) })
	status := map[string]any{"phase": phase}
	if node != "" {
		status["nodeRef"] = map[string]any{"kind": "Node", "name": node}
	}
	created.Object["status"] = status
	if _, err := api.UpdateStatus(ctx, created, metav1.UpdateOptions{}); err != nil {
		t.Fatal(err)
	}
}

// releaseMachine deletes a Machine and drops the test's finalizer: it is
// gone, as after the machine controller deleted its instance.
func releaseMachine(ctx context.Context, t *testing.T, dyn dynamic.Interface, name string) {
	t.Helper()
	api := dyn.Resource(machinesGVR).Namespace(machineNS)
	if err := api.Delete(ctx, name, metav1.DeleteOptions{}); err != nil && !apierrors.IsNotFound(err) {
		t.Errorf("delete Machine %s: %v", name, err)
	}
	_, err := api.Patch(ctx, name, types.MergePatchType, []byte(`{"metadata":{"finalizers":null}}`), metav1.PatchOptions{})
	if err != nil && !apierrors.IsNotFound(err) {
		t.Errorf("release Machine %s: %v", name, err)
	}
}

// TestDeletingMachineCountsAgainstThePool: a node whose Machine the machine
// controller is deleting counts as unavailable: with maxUnavailable 1 no
// other node of the pool is granted until the Machine is gone, and the
// pool's status says which Machine and why.
func TestDeletingMachineCountsAgainstThePool(t *testing.T) {
	const prefix = "machine-del"
	r := newRig(t, prefix, 3, 1)
	installMachineAPI(r.ctx, t, r.cp)
	for i, n := range r.nodes {
		createMachine(r.ctx, t, r.dyn, prefix+"-m"+string(rune('0'+i)), "worker", n, "Running", i == 1)
	}
	if err := r.dyn.Resource(machinesGVR).Namespace(machineNS).Delete(r.ctx, prefix+"-m1", metav1.DeleteOptions{}); err != nil {
		t.Fatal(err)
	}
	createPool(t, r.dyn, prefix, &v1alpha1.UpdatePool{ObjectMeta: metav1.ObjectMeta{Name: prefix}, Spec: v1alpha1.UpdatePoolSpec{
		NodeSelector: groupSelector(prefix), OSImage: "os:md1", MaxUnavailable: ptr.To(intstrPercent("34%")), // 1 of 3
	}})
	runCoordinator(r.ctx, t, r.cp, r.dyn, prefix)
	waitPoolCondition(t, r.dyn, prefix, v1alpha1.PoolUpdating, 30*time.Second, "machine "+machineNS+"/"+prefix+"-m1 is being deleted")
	noGrantBut(r.ctx, t, r.cp, r.nodes, "", "while a Machine of the pool is being deleted")
	releaseMachine(r.ctx, t, r.dyn, prefix+"-m1")
	g := r.agents.next(t, 30*time.Second)
	noGrantBut(r.ctx, t, r.cp, r.nodes, g.node, "after the Machine was gone")
}

// TestControlPlaneWaitsForAReplacementMachine: a control-plane Machine
// still provisioning (no node yet) holds every control-plane grant; once
// it runs with its node, the control-plane pool goes on.
func TestControlPlaneWaitsForAReplacementMachine(t *testing.T) {
	const prefix = "machine-cp"
	cp, dyn := setup(t)
	ctx, cancel := context.WithCancel(context.Background())
	t.Cleanup(cancel)
	nodes := cp.CreateNodes(t, cluster.NodeSpec{Prefix: prefix, Count: 1, Role: "control-plane"})
	renewLeases(t, cp, nodes)
	agents := scriptAgents(ctx, t, cp, cluster.GroupLabel+"="+prefix)
	installMachineAPI(ctx, t, cp)
	createMachine(ctx, t, dyn, prefix+"-replacement", "master", "", "Provisioning", false)
	createPool(t, dyn, prefix, &v1alpha1.UpdatePool{ObjectMeta: metav1.ObjectMeta{Name: prefix}, Spec: v1alpha1.UpdatePoolSpec{
		NodeSelector: groupSelector(prefix), OSImage: "os:mc1", MaxUnavailable: ptr.To(intstrPercent("100%")),
	}})
	runCoordinator(ctx, t, cp, dyn, prefix)
	waitPoolCondition(t, dyn, prefix, v1alpha1.PoolUpdating, 30*time.Second, "control-plane machine "+machineNS+"/"+prefix+"-replacement is provisioning")
	noGrantBut(ctx, t, cp, nodes, "", "while a control-plane Machine is provisioning")
	releaseMachine(ctx, t, dyn, prefix+"-replacement")
	if g := agents.next(t, 30*time.Second); g.node != nodes[0] {
		t.Errorf("granted %s, want %s", g.node, nodes[0])
	}
}

// machineHooks are the names of a Machine's preDrain hooks.
func machineHooks(ctx context.Context, t *testing.T, dyn dynamic.Interface, name string) []string {
	t.Helper()
	m, err := dyn.Resource(machinesGVR).Namespace(machineNS).Get(ctx, name, metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	hooks, _, _ := unstructured.NestedSlice(m.Object, "spec", "lifecycleHooks", "preDrain")
	var names []string
	for _, h := range hooks {
		hook, _ := h.(map[string]any)
		n, _ := hook["name"].(string)
		names = append(names, n)
	}
	return names
}

// TestUpdateHoldsTheMachinesPreDrainHook: a node's update holds its
// Machine's pre-drain hook from before the grant until it ends, through
// the Machine's deletion meanwhile, and drops only its own: the etcd
// quorum guard's hook stays.
func TestUpdateHoldsTheMachinesPreDrainHook(t *testing.T) {
	const prefix = "machine-hook"
	r := newRig(t, prefix, 1, 1)
	installMachineAPI(r.ctx, t, r.cp)
	name := prefix + "-m0"
	createMachine(r.ctx, t, r.dyn, name, "worker", r.nodes[0], "Running", true)
	other := `{"spec":{"lifecycleHooks":{"preDrain":[{"name":"EtcdQuorumOperator","owner":"clusteroperator/etcd"}]}}}`
	if _, err := r.dyn.Resource(machinesGVR).Namespace(machineNS).Patch(r.ctx, name, types.MergePatchType, []byte(other), metav1.PatchOptions{}); err != nil {
		t.Fatal(err)
	}
	createPool(t, r.dyn, prefix, &v1alpha1.UpdatePool{ObjectMeta: metav1.ObjectMeta{Name: prefix}, Spec: v1alpha1.UpdatePoolSpec{
		NodeSelector: groupSelector(prefix), OSImage: "os:mh1", MaxUnavailable: ptr.To(intstrPercent("100%")),
	}})
	runCoordinator(r.ctx, t, r.cp, r.dyn, prefix)
	g := r.agents.next(t, 30*time.Second)
	if hooks := machineHooks(r.ctx, t, r.dyn, name); !slices.Contains(hooks, "nodeward.io/Update") || !slices.Contains(hooks, "EtcdQuorumOperator") {
		t.Fatalf("hooks once granted: %v; want nodeward's beside the etcd guard's", hooks)
	}
	// The Machine's deletion starts mid-update: the hook stays.
	r.agents.mustReport(r.ctx, t, g, v1alpha1.StepDraining)
	if err := r.dyn.Resource(machinesGVR).Namespace(machineNS).Delete(r.ctx, name, metav1.DeleteOptions{}); err != nil {
		t.Fatal(err)
	}
	holdsFor(t, 3*time.Second, "nodeward's hook while the node updates", func() bool {
		return slices.Contains(machineHooks(r.ctx, t, r.dyn, name), "nodeward.io/Update")
	})
	r.agents.mustReport(r.ctx, t, g, v1alpha1.StepDone)
	cluster.WaitFor(t, 30*time.Second, "nodeward's hook dropped once the update ended", func(ctx context.Context) (bool, error) {
		hooks := machineHooks(ctx, t, r.dyn, name)
		return !slices.Contains(hooks, "nodeward.io/Update") && slices.Contains(hooks, "EtcdQuorumOperator"), nil
	})
}

// holdsFor checks cond every 100 ms for d.
func holdsFor(t *testing.T, d time.Duration, what string, cond func() bool) {
	t.Helper()
	tick := time.NewTicker(100 * time.Millisecond)
	defer tick.Stop()
	for end := time.Now().Add(d); time.Now().Before(end); <-tick.C {
		if !cond() {
			t.Fatalf("%s: broken", what)
		}
	}
}

// TestMachineHookOutlivesNoCoordinator: the coordinator that held a
// Machine's hook is killed mid-update; the update ends while none runs; a
// new coordinator drops the hook it did not write.
func TestMachineHookOutlivesNoCoordinator(t *testing.T) {
	const prefix = "machine-restart"
	r := newRig(t, prefix, 1, 1)
	installMachineAPI(r.ctx, t, r.cp)
	name := prefix + "-m0"
	createMachine(r.ctx, t, r.dyn, name, "worker", r.nodes[0], "Running", false)
	createPool(t, r.dyn, prefix, &v1alpha1.UpdatePool{ObjectMeta: metav1.ObjectMeta{Name: prefix}, Spec: v1alpha1.UpdatePoolSpec{
		NodeSelector: groupSelector(prefix), OSImage: "os:mr1", MaxUnavailable: ptr.To(intstrPercent("100%")),
	}})
	first, kill := context.WithCancel(r.ctx)
	runCoordinator(first, t, r.cp, r.dyn, prefix)
	g := r.agents.next(t, 30*time.Second)
	if !slices.Contains(machineHooks(r.ctx, t, r.dyn, name), "nodeward.io/Update") {
		t.Fatal("no hook on the granted node's Machine")
	}
	kill()
	r.agents.mustReport(r.ctx, t, g, v1alpha1.StepDone)
	holdsFor(t, 2*time.Second, "the hook kept while no coordinator runs", func() bool {
		return slices.Contains(machineHooks(r.ctx, t, r.dyn, name), "nodeward.io/Update")
	})
	runCoordinator(r.ctx, t, r.cp, r.dyn, prefix)
	cluster.WaitFor(t, 30*time.Second, "the new coordinator drops the hook of the ended update", func(ctx context.Context) (bool, error) {
		return !slices.Contains(machineHooks(ctx, t, r.dyn, name), "nodeward.io/Update"), nil
	})
}

// TestSoakHoldsNoMachineHook: a node Done under its grant, soaking, holds
// the grant and its slot but not its Machine's pre-drain hook: its update
// is over, and a deletion of the Machine meanwhile goes on (a soak that
// waits for the node to serve again would otherwise wait for ever on a
// Machine the hook keeps from going; protocol simulator seed 1000023).
func TestSoakHoldsNoMachineHook(t *testing.T) {
	const prefix = "machine-soak"
	r := newRig(t, prefix, 1, 1)
	installMachineAPI(r.ctx, t, r.cp)
	name := prefix + "-m0"
	createMachine(r.ctx, t, r.dyn, name, "worker", r.nodes[0], "Running", false)
	createPool(t, r.dyn, prefix, &v1alpha1.UpdatePool{ObjectMeta: metav1.ObjectMeta{Name: prefix}, Spec: v1alpha1.UpdatePoolSpec{
		NodeSelector: groupSelector(prefix), OSImage: "os:ms1", MaxUnavailable: ptr.To(intstrPercent("100%")), Soak: "1h",
	}})
	runCoordinator(r.ctx, t, r.cp, r.dyn, prefix)
	g := r.agents.next(t, 30*time.Second)
	r.agents.mustReport(r.ctx, t, g, v1alpha1.StepRebooting)
	holdsFor(t, 3*time.Second, "nodeward's hook while the node reboots", func() bool {
		return slices.Contains(machineHooks(r.ctx, t, r.dyn, name), "nodeward.io/Update")
	})
	r.agents.mustReport(r.ctx, t, g, v1alpha1.StepDone)
	cluster.WaitFor(t, 30*time.Second, "the hook dropped at Done, the grant kept for the soak", func(ctx context.Context) (bool, error) {
		n, err := r.cp.Client().CoreV1().Nodes().Get(ctx, r.nodes[0], metav1.GetOptions{})
		if err != nil {
			return false, err
		}
		if n.Annotations[v1alpha1.AnnotationGrant] != g.grant {
			t.Fatalf("grant %q released during a soak of 1h", n.Annotations[v1alpha1.AnnotationGrant])
		}
		return !slices.Contains(machineHooks(ctx, t, r.dyn, name), "nodeward.io/Update"), nil
	})
}

// TestDepartureEndsWithItsMachine: a node deleted mid-update departs and
// keeps the pool's one slot while its machine may come back; once its
// Machine is gone, the machine is deleted for good, the departure ends and
// the pool's other node is granted (protocol simulator seeds 2000022,
// 2000040, 2000380: the departure held the pool for ever).
func TestDepartureEndsWithItsMachine(t *testing.T) {
	const prefix = "machine-depart"
	r := newRig(t, prefix, 2, 1)
	installMachineAPI(r.ctx, t, r.cp)
	machineOf := map[string]string{}
	for i, n := range r.nodes {
		machineOf[n] = fmt.Sprintf("%s-m%d", prefix, i)
		createMachine(r.ctx, t, r.dyn, machineOf[n], "worker", n, "Running", true)
	}
	createPool(t, r.dyn, prefix, &v1alpha1.UpdatePool{ObjectMeta: metav1.ObjectMeta{Name: prefix}, Spec: v1alpha1.UpdatePoolSpec{
		NodeSelector: groupSelector(prefix), OSImage: "os:md2", MaxUnavailable: ptr.To(intstrInt(1)),
	}})
	runCoordinator(r.ctx, t, r.cp, r.dyn, prefix)
	g := r.agents.next(t, 30*time.Second)
	r.agents.mustReport(r.ctx, t, g, v1alpha1.StepRebooting)
	if err := r.cp.Client().CoreV1().Nodes().Delete(r.ctx, g.node, metav1.DeleteOptions{}); err != nil {
		t.Fatal(err)
	}
	waitPoolCondition(t, r.dyn, prefix, v1alpha1.PoolUpdating, 30*time.Second, g.node)
	holdsFor(t, 3*time.Second, "no grant while the departed machine may come back", func() bool {
		for _, n := range r.nodes {
			if n != g.node && getNode(r.ctx, t, r.cp, n).Annotations[v1alpha1.AnnotationGrant] != "" {
				return false
			}
		}
		return true
	})
	releaseMachine(r.ctx, t, r.dyn, machineOf[g.node])
	next := r.agents.next(t, 30*time.Second)
	if next.node == g.node {
		t.Fatalf("granted the departed node %s again", g.node)
	}
}
