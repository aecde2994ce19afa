package mco_test

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
	"github.com/nodeward/nodeward/test/mco"
)

// TestMustGatherMCOMode: real `nodeward agent --protocol=mco` processes
// under the real MCO controller, mid-rollout from the first rendered
// config to the second: `nodeward must-gather` finds the MCO's API
// served and writes every node's MachineConfigNode, the pool, and each
// Node's machineconfiguration.openshift.io/ annotations.
func TestMustGatherMCOMode(t *testing.T) {
	first := demoConfig("quay.io/fedora/fedora-coreos:41", nil, "one", "")
	second := demoConfig("quay.io/fedora/fedora-coreos:42", []string{"nodeward.test=1"}, "two", "")
	p := newAgentPool(t, "mustgather", 2, first, second)
	p.startAgents(t)
	p.start(t, mco.TechPreviewNoUpgrade)
	p.c.WaitPool(p.pool.Name, time.Minute, "Updated on "+p.config1, func(s mco.PoolStatus) bool {
		return s.IsTrue("Updated") && s.UpdatedMachineCount == 2 && s.Configuration == p.config1
	})
	if err := p.c.SetPoolConfig(context.Background(), p.pool.Name, p.config2); err != nil {
		t.Fatal(err)
	}
	cluster.WaitFor(t, time.Minute, "a node told to update to "+p.config2, func(context.Context) (bool, error) {
		return len(p.targeted(t, p.config2)) > 0, nil
	})
	bin, err := cluster.NodewardBinary(cluster.ReleaseBuild)
	if err != nil {
		t.Fatal(err)
	}
	dest := filepath.Join(t.TempDir(), "mg")
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	out, err := exec.CommandContext(ctx, bin, "must-gather", "--kubeconfig", p.cp.KubeconfigPath(), "--dest-dir", dest).CombinedOutput()
	var exit *exec.ExitError
	if err != nil && (!errors.As(err, &exit) || exit.ExitCode() != 2) {
		t.Fatalf("must-gather: %v\n%s", err, out)
	}
	var idx mustgather.Index
	if err := json.Unmarshal(gathered(t, dest, "index.json"), &idx); err != nil {
		t.Fatal(err)
	}
	for _, part := range idx.Parts {
		if strings.HasPrefix(part.Name, "machineconfig") && (part.Skipped != "" || part.Error != "" || len(part.Files) != 1) {
			t.Errorf("%s: %+v; want collected", part.Name, part)
		}
	}
	mcns, pools := string(gathered(t, dest, "mco/machineconfignodes.json")), string(gathered(t, dest, "mco/machineconfigpools.json"))
	for _, node := range p.nodes {
		if !strings.Contains(mcns, `"name": "`+node+`"`) {
			t.Errorf("mco/machineconfignodes.json lacks %s", node)
		}
		if n := string(gathered(t, dest, "nodes/"+node+".json")); !strings.Contains(n, mco.AnnotationCurrentConfig) {
			t.Errorf("nodes/%s.json lacks %s:\n%s", node, mco.AnnotationCurrentConfig, n)
		}
	}
	if !strings.Contains(pools, `"name": "`+p.pool.Name+`"`) || !strings.Contains(pools, p.config2) {
		t.Errorf("mco/machineconfigpools.json lacks pool %s on %s:\n%.3000s", p.pool.Name, p.config2, pools)
	}
}

func gathered(t *testing.T, dir, name string) []byte {
	t.Helper()
	data, err := os.ReadFile(filepath.Join(dir, filepath.FromSlash(name)))
	if err != nil {
		t.Fatalf("the archive lacks %s: %v", name, err)
	}
	return data
}
