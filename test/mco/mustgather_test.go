package mco_test

import (
	"context"
	"strings"
	"testing"
	"time"

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
	g := p.cp.MustGather(t)
	for _, part := range g.Index.Parts {
		if strings.HasPrefix(part.Name, "machineconfig") && (part.Skipped != "" || part.Error != "" || len(part.Files) != 1) {
			t.Errorf("%s: %+v; want collected", part.Name, part)
		}
	}
	mcns, pools := string(g.File(t, "mco/machineconfignodes.json")), string(g.File(t, "mco/machineconfigpools.json"))
	for _, node := range p.nodes {
		if !strings.Contains(mcns, `"name": "`+node+`"`) {
			t.Errorf("mco/machineconfignodes.json lacks %s", node)
		}
		if n := string(g.File(t, "nodes/"+node+".json")); !strings.Contains(n, mco.AnnotationCurrentConfig) {
			t.Errorf("nodes/%s.json lacks %s:\n%s", node, mco.AnnotationCurrentConfig, n)
		}
	}
	if !strings.Contains(pools, `"name": "`+p.pool.Name+`"`) || !strings.Contains(pools, p.config2) {
		t.Errorf("mco/machineconfigpools.json lacks pool %s on %s:\n%.3000s", p.pool.Name, p.config2, pools)
	}
}
