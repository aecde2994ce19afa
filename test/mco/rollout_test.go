package mco_test

import (
	"context"
	"slices"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"

	"github.com/nodeward/nodeward/test/cluster"
	"github.com/nodeward/nodeward/test/mco"
)

// TestRealControllerPicksOneNodeAtATime: the real node controller (Default
// feature set, its real 5 s update delay) rolls a new rendered config over
// three nodes with maxUnavailable 1. The test plays the daemon: when a node
// is told to update (desiredConfig) it reports the update done. The
// controller must tell exactly one node at a time, taint the nodes still to
// update, move on only after the daemon reports Done, and end with the pool
// Updated on the new config.
func TestRealControllerPicksOneNodeAtATime(t *testing.T) {
	f := newFixture(t, "onebyone", 3)
	ctx := context.Background()
	f.start(t, mco.Default)

	// Before the rollout: the controller counts every provisioned node
	// updated, so the pool is Updated on its first config.
	f.c.WaitPool(f.pool.Name, 30*time.Second, "Updated on "+f.config1, func(s mco.PoolStatus) bool {
		return s.IsTrue("Updated") && s.MachineCount == 3 && s.UpdatedMachineCount == 3 && s.Configuration == f.config1
	})

	// The controller copies the ControllerConfig's topology (Install's
	// InstallOptions.Topology) onto the pool's nodes.
	for _, name := range f.nodes {
		f.c.WaitNode(name, 15*time.Second, "topology annotation", func(n *corev1.Node) bool {
			return n.Annotations[mco.AnnotationTopology] == mco.HighlyAvailable
		})
	}

	began := time.Now()
	if err := f.c.SetPoolConfig(ctx, f.pool.Name, f.config2); err != nil {
		t.Fatal(err)
	}
	var order []string
	for step := range f.nodes {
		var picked string
		pickStart := time.Now()
		cluster.WaitFor(t, 30*time.Second, "a node told to update", func(context.Context) (bool, error) {
			targeted := f.targeted(t, f.config2)
			if len(targeted) > 1 {
				t.Fatalf("step %d: %d nodes told to update at once: %v (maxUnavailable 1)", step, len(targeted), targeted)
			}
			if len(targeted) == 1 {
				picked = targeted[0]
			}
			return picked != "", nil
		})
		t.Logf("step %d: %s told to update %s after the previous step", step, picked, time.Since(pickStart).Round(10*time.Millisecond))
		if slices.Contains(order, picked) {
			t.Fatalf("%s picked twice (order so far %v)", picked, order)
		}
		order = append(order, picked)
		if step == 0 {
			t.Logf("first node picked %s after the pool changed", time.Since(began).Round(10*time.Millisecond))
			// The nodes still to update carry the taint so that the
			// scheduler prefers the others. (The picked node loses it again
			// once its desiredConfig is the pool's: the taint marks nodes
			// not yet told to update.)
			for _, name := range f.nodes {
				if name == picked {
					continue
				}
				f.c.WaitNode(name, 15*time.Second, "UpdateInProgress taint", func(n *corev1.Node) bool {
					return mco.HasTaint(n, mco.UpdateInProgressTaint)
				})
			}
			st, err := f.c.PoolStatus(ctx, f.pool.Name)
			if err != nil {
				t.Fatal(err)
			}
			if st.IsTrue("Updated") {
				t.Errorf("pool Updated during the rollout: %s", st)
			}
		}
		// The daemon's part: the update is applied.
		if _, err := f.c.CompleteUpdate(ctx, picked); err != nil {
			t.Fatal(err)
		}
	}
	st := f.c.WaitPool(f.pool.Name, 30*time.Second, "Updated on "+f.config2, func(s mco.PoolStatus) bool {
		return s.IsTrue("Updated") && !s.IsTrue("Updating") && s.UpdatedMachineCount == 3 && s.Configuration == f.config2
	})
	for _, name := range f.nodes {
		if n := f.node(t, name); mco.HasTaint(n, mco.UpdateInProgressTaint) {
			t.Errorf("%s still tainted %s after the rollout", name, mco.UpdateInProgressTaint)
		}
	}
	t.Logf("rollout of 3 nodes in %s, order %v; pool %s", time.Since(began).Round(10*time.Millisecond), order, st)
	// The zones sort the candidates: one zone per node, in node order.
	if !slices.Equal(order, f.nodes) {
		t.Errorf("update order %v, want the zone order %v", order, f.nodes)
	}
	if f.watch.Max() != 1 {
		t.Errorf("at most %d nodes unavailable at once %v, want exactly 1", f.watch.Max(), f.watch.Peak())
	}
}
