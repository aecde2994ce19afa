package coordinator

import (
	"strings"
	"testing"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
)

// machine is an unstructured Machine of api with node, phase and labels;
// deleting sets its deletionTimestamp.
func machine(name, node, phase string, labels map[string]string, deleting bool) *unstructured.Unstructured {
	m := &unstructured.Unstructured{Object: map[string]any{"status": map[string]any{}}}
	m.SetNamespace("openshift-machine-api")
	m.SetName(name)
	m.SetLabels(labels)
	if node != "" {
		_ = unstructured.SetNestedField(m.Object, node, "status", "nodeRef", "name")
	}
	if phase != "" {
		_ = unstructured.SetNestedField(m.Object, phase, "status", "phase")
	}
	if deleting {
		now := metav1.Now()
		m.SetDeletionTimestamp(&now)
	}
	return m
}

var (
	openshiftMachines = machineAPIs[0]
	clusterAPI        = machineAPIs[1]
	master            = map[string]string{"machine.openshift.io/cluster-api-machine-role": "master"}
)

func TestMachineRecords(t *testing.T) {
	remediated := machine("w3", "n3", "Running", nil, false)
	_ = unstructured.SetNestedSlice(remediated.Object, []any{map[string]any{"type": "OwnerRemediated", "status": "False"}}, "status", "conditions")
	failed := machine("w4", "n4", "Failed", nil, false)
	_ = unstructured.SetNestedField(failed.Object, "instance terminated", "status", "errorMessage")
	for _, tc := range []struct {
		name    string
		api     machineAPI
		m       *unstructured.Unstructured
		problem string
		cp      bool
	}{
		{"running", openshiftMachines, machine("w1", "n1", "Running", nil, false), "", false},
		{"deleting", openshiftMachines, machine("w1", "n1", "Deleting", nil, true), "machine openshift-machine-api/w1 is being deleted", false},
		{"provisioning", openshiftMachines, machine("m9", "", "Provisioning", master, false), "machine openshift-machine-api/m9 is provisioning (no node yet)", true},
		{"failed", openshiftMachines, failed, "machine openshift-machine-api/w4 failed: instance terminated", false},
		{"remediated (Cluster API)", clusterAPI, remediated, "machine openshift-machine-api/w3 is being remediated (OwnerRemediated False)", false},
		{"Cluster API control plane", clusterAPI, machine("cp1", "c1", "Running", map[string]string{"cluster.x-k8s.io/control-plane": ""}, false), "", true},
	} {
		r := recordOf(tc.api, tc.m)
		if r.problem != tc.problem || r.controlPlane != tc.cp {
			t.Errorf("%s: problem %q control plane %v; want %q, %v", tc.name, r.problem, r.controlPlane, tc.problem, tc.cp)
		}
	}
}

func TestMachineIndex(t *testing.T) {
	var none *machineIndex
	if v := none.view(); v.byNode["n1"] != "" || v.controlPlane != "" {
		t.Fatal("a nil index (no Machine API) must know of no problem")
	}
	x := newMachineIndex()
	if !x.set(recordOf(openshiftMachines, machine("w1", "n1", "Running", nil, false))) {
		t.Fatal("a new Machine must change the index")
	}
	if x.set(recordOf(openshiftMachines, machine("w1", "n1", "Running", nil, false))) {
		t.Error("the same Machine again must not re-plan")
	}
	if x.view().byNode["n1"] != "" {
		t.Errorf("a running Machine's node: %q", x.view().byNode["n1"])
	}
	x.set(recordOf(openshiftMachines, machine("w1", "n1", "Deleting", nil, true)))
	if p := x.view().byNode["n1"]; !strings.Contains(p, "is being deleted") {
		t.Errorf("a deleting Machine's node: %q", p)
	}
	// Two Machines claiming one node: reported, never guessed.
	x.set(recordOf(openshiftMachines, machine("w2", "n2", "Running", nil, false)))
	x.set(recordOf(openshiftMachines, machine("w2b", "n2", "Running", nil, false)))
	if p := x.view().byNode["n2"]; !strings.Contains(p, "claimed by 2 Machines") || !strings.Contains(p, "w2b") {
		t.Errorf("a node two Machines claim: %q", p)
	}
	x.remove(recordOf(openshiftMachines, machine("w2b", "", "", nil, false)).key)
	if p := x.view().byNode["n2"]; p != "" {
		t.Errorf("the second claim gone: %q", p)
	}
	// A control-plane replacement still provisioning holds the control plane.
	x.set(recordOf(openshiftMachines, machine("m3", "", "Provisioning", master, false)))
	if p := x.view().controlPlane; !strings.Contains(p, "m3 is provisioning") {
		t.Errorf("control plane with a replacement provisioning: %q", p)
	}
	x.set(recordOf(openshiftMachines, machine("m3", "c3", "Running", master, false)))
	if p := x.view().controlPlane; p != "" {
		t.Errorf("control plane with the replacement running: %q", p)
	}
}

// OpenShift's etcd operator keeps its pre-drain hook (EtcdQuorumOperator,
// owner clusteroperator/etcd) on every control-plane Machine not being
// deleted, and drops it from a deleting one once its etcd member is gone
// (cluster-etcd-operator, machinedeletionhooks). The hook alone therefore
// says nothing: counting it would hold every control-plane update forever.
// A Machine it holds is being deleted, and that holds the control plane
// until the Machine is gone.
func TestEtcdQuorumHookAloneHoldsNoControlPlaneGrant(t *testing.T) {
	etcd := []any{map[string]any{"name": "EtcdQuorumOperator", "owner": "clusteroperator/etcd"}}
	x := newMachineIndex()
	for _, name := range []string{"m0", "m1", "m2"} {
		m := machine(name, "c-"+name, "Running", master, false)
		_ = unstructured.SetNestedSlice(m.Object, etcd, "spec", "lifecycleHooks", "preDrain")
		x.set(recordOf(openshiftMachines, m))
	}
	if p := x.view().controlPlane; p != "" {
		t.Errorf("control-plane Machines carrying only the etcd hook hold the control plane: %q", p)
	}
	deleting := machine("m0", "c-m0", "Deleting", master, true)
	_ = unstructured.SetNestedSlice(deleting.Object, etcd, "spec", "lifecycleHooks", "preDrain")
	x.set(recordOf(openshiftMachines, deleting))
	if p := x.view().controlPlane; !strings.Contains(p, "m0 is being deleted") {
		t.Errorf("a deleting control-plane Machine held by the etcd hook: %q", p)
	}
}
