package machineapi_test

import (
	"context"
	"strings"
	"testing"

	"github.com/nodeward/nodeward/test/cluster"
	"github.com/nodeward/nodeward/test/machineapi"
)

// TestMustGatherMachines: under the real Machine API controllers, a
// Machine holding nodeward's pre-drain hook and an annotation with a
// planted token: `nodeward must-gather` finds the Machine API served,
// writes the Machine's hooks, phase and node (not its provider spec), the
// Node's link to it, and no planted token.
func TestMustGatherMachines(t *testing.T) {
	cp := env.ControlPlane(t)
	mapi := machineapi.Start(t, cp, machineapi.Options{})
	const planted = "planted-machine-token-3d9f"
	node := cp.CreateNodes(t, cluster.NodeSpec{Prefix: "mg", Count: 1, Role: "worker"})[0]
	mapi.CreateMachine(context.Background(), machineapi.MachineSpec{Name: "mg", Role: "worker", NodeName: node,
		PreDrainHooks: []machineapi.Hook{{Name: "nodeward.io/Update", Owner: "nodeward"}},
		Annotations:   map[string]string{"example.com/api-token": planted}})
	waitLinked(t, cp, mapi, "mg", node)
	g := cp.MustGather(t)
	for _, p := range g.Index.Parts {
		if p.Name == "machines-openshift" && (p.Skipped != "" || p.Error != "" || len(p.Files) != 1) {
			t.Errorf("machines-openshift: %+v; want collected", p)
		}
	}
	machines := string(g.File(t, "machines/openshift.json"))
	for _, want := range []string{`"name": "mg"`, `"nodeward.io/Update"`, `"phase": "Running"`, `"name": "` + node + `"`} {
		if !strings.Contains(machines, want) {
			t.Errorf("machines/openshift.json lacks %s:\n%s", want, machines)
		}
	}
	for _, never := range []string{planted, "providerSpec"} {
		if strings.Contains(machines, never) {
			t.Errorf("machines/openshift.json holds %q:\n%s", never, machines)
		}
	}
	if n := string(g.File(t, "nodes/"+node+".json")); !strings.Contains(n, machineapi.AnnotationMachine) {
		t.Errorf("nodes/%s.json lacks the Machine link %s:\n%s", node, machineapi.AnnotationMachine, n)
	}
}
