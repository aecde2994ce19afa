package mco_test

import (
	"context"
	"testing"
	"time"

	"github.com/nodeward/nodeward/test/cluster"
	"github.com/nodeward/nodeward/test/mco"
)

// TestTechPreviewCountsOnlyMachineConfigNodes records the baseline the
// agent's MachineConfigNode work has to change. Under TechPreviewNoUpgrade
// the ImageModeStatusReporting gate makes the node controller take a pool's
// updatedMachineCount (and degradedMachineCount) from the conditions of
// each node's MachineConfigNode, not from the node annotations
// (pkg/controller/node/status.go, calculateStatus). Nothing here writes
// MachineConfigNodes (the node controller never creates them; the daemon
// does), so:
//   - the same pool that is Updated under Default drops to
//     updatedMachineCount 0, Updated=False once the controller restarts
//     with TechPreviewNoUpgrade;
//   - a rollout still proceeds one node at a time (candidates and capacity
//     come from the node annotations) and every node reaches the new
//     config, yet updatedMachineCount stays 0, the pool never becomes
//     Updated and status.configuration stays on the old config.
//
// When nodeward's agent writes MachineConfigNode status, this test is the
// one to flip: updatedMachineCount must then reach the node count.
func TestTechPreviewCountsOnlyMachineConfigNodes(t *testing.T) {
	f := newFixture(t, "techpreview", 2)
	ctx := context.Background()
	ctrl := f.start(t, mco.Default)
	f.c.WaitPool(f.pool.Name, 30*time.Second, "Updated under Default", func(s mco.PoolStatus) bool {
		return s.IsTrue("Updated") && s.MachineCount == 2 && s.UpdatedMachineCount == 2
	})

	ctrl.Restart(mco.ControllerOptions{FeatureSet: mco.TechPreviewNoUpgrade})
	if !ctrl.LogContains("feature gate ImageModeStatusReporting enabled=true") {
		t.Fatal("TechPreviewNoUpgrade did not enable ImageModeStatusReporting; see " + ctrl.LogPath())
	}
	st := f.c.WaitPool(f.pool.Name, 30*time.Second, "updatedMachineCount 0 without MachineConfigNodes", func(s mco.PoolStatus) bool {
		return s.MachineCount == 2 && s.UpdatedMachineCount == 0 && !s.IsTrue("Updated")
	})
	t.Logf("TechPreviewNoUpgrade, no rollout: %s", st)

	if err := f.c.SetPoolConfig(ctx, f.pool.Name, f.config2); err != nil {
		t.Fatal(err)
	}
	for range f.nodes {
		var picked string
		cluster.WaitFor(t, 30*time.Second, "a node told to update", func(context.Context) (bool, error) {
			targeted := f.targeted(t, f.config2)
			if len(targeted) > 1 {
				t.Fatalf("%d nodes told to update at once: %v", len(targeted), targeted)
			}
			if len(targeted) == 1 {
				picked = targeted[0]
			}
			return picked != "", nil
		})
		if _, err := f.c.CompleteUpdate(ctx, picked); err != nil {
			t.Fatal(err)
		}
	}
	// readyMachineCount 2 and no unavailable node: the controller has
	// computed the status after the last node reported Done, so what
	// follows is its verdict on the finished rollout, not a stale one.
	st = f.c.WaitPool(f.pool.Name, 30*time.Second, "status computed after the rollout", func(s mco.PoolStatus) bool {
		return s.ReadyMachineCount == 2 && s.UnavailableMachineCount == 0
	})
	t.Logf("TechPreviewNoUpgrade, every node on %s: %s", f.config2, st)
	if st.UpdatedMachineCount != 0 || st.IsTrue("Updated") || st.Configuration == f.config2 {
		t.Errorf("baseline changed: without MachineConfigNodes the pool reports %s; "+
			"if MachineConfigNodes are now written, flip this test", st)
	}
	for _, n := range f.nodes {
		if mcn, found, err := f.c.MachineConfigNode(ctx, n); err != nil || found {
			t.Errorf("MachineConfigNode %s: found %v (%+v), err %v; the baseline assumes none", n, found, mcn.Conditions, err)
		}
	}
}
