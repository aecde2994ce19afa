package machineapi_test

import (
	"context"
	"encoding/json"
	"errors"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/nodeward/nodeward/mustgather"
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
	bin, err := cluster.NodewardBinary(cluster.ReleaseBuild)
	if err != nil {
		t.Fatal(err)
	}
	dest := filepath.Join(t.TempDir(), "mg")
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	out, err := exec.CommandContext(ctx, bin, "must-gather", "--kubeconfig", cp.KubeconfigPath(), "--dest-dir", dest).CombinedOutput()
	var exit *exec.ExitError
	if err != nil && (!errors.As(err, &exit) || exit.ExitCode() != 2) {
		t.Fatalf("must-gather: %v\n%s", err, out)
	}
	var idx mustgather.Index
	if err := json.Unmarshal(readGathered(t, dest, "index.json"), &idx); err != nil {
		t.Fatal(err)
	}
	for _, p := range idx.Parts {
		if p.Name == "machines-openshift" && (p.Skipped != "" || p.Error != "" || len(p.Files) != 1) {
			t.Errorf("machines-openshift: %+v; want collected", p)
		}
	}
	machines := string(readGathered(t, dest, "machines/openshift.json"))
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
	if n := string(readGathered(t, dest, "nodes/"+node+".json")); !strings.Contains(n, machineapi.AnnotationMachine) {
		t.Errorf("nodes/%s.json lacks the Machine link %s:\n%s", node, machineapi.AnnotationMachine, n)
	}
}

func readGathered(t *testing.T, dir, name string) []byte {
	t.Helper()
	data, err := os.ReadFile(filepath.Join(dir, filepath.FromSlash(name)))
	if err != nil {
		t.Fatalf("the archive lacks %s: %v", name, err)
	}
	return data
}
