package coordinator

import (
	"strings"
	"testing"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/testutil"
	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/util/intstr"

	"github.com/nodeward/nodeward/api/v1alpha1"
)

// TestPoolWaitReasons: the plan names why a pool with nodes left makes no
// progress with one of a fixed set of reasons, the operator's choices
// (pause, windows) before the budget.
func TestPoolWaitReasons(t *testing.T) {
	closed := func(s *v1alpha1.UpdatePoolSpec) {
		// Saturdays only; now is a Sunday.
		s.MaintenanceWindows = []v1alpha1.MaintenanceWindow{{Days: []string{"Sat"}, Start: "01:00", Duration: "1h"}}
	}
	paused := func(s *v1alpha1.UpdatePoolSpec) { s.Paused = true }
	for _, tc := range []struct {
		name  string
		pool  *v1alpha1.UpdatePool
		nodes func() fleet
		want  waitReason
	}{
		{"grants made", pool(intstr.FromInt32(1)), func() fleet { return healthy(3) }, waitNone},
		{"all updated", pool(intstr.FromInt32(1)), func() fleet {
			f := healthy(2)
			for i := range f {
				f.annotate(i, v1alpha1.AnnotationState, "Done", v1alpha1.AnnotationStateTarget, "quay.io/os:2")
			}
			return f
		}, waitNone},
		{"paused", pool(intstr.FromInt32(1), paused), func() fleet { return healthy(3) }, waitPaused},
		{"outside window", pool(intstr.FromInt32(1), closed), func() fleet { return healthy(3) }, waitOutsideWindow},
		{"limit reached", pool(intstr.FromInt32(1)), func() fleet {
			f := healthy(3)
			f.annotate(0, v1alpha1.AnnotationGrant, "g", v1alpha1.AnnotationState, "Rebooting", v1alpha1.AnnotationStateGrant, "g")
			return f
		}, waitLimitReached},
		{"drain blocked", pool(intstr.FromInt32(1)), func() fleet {
			f := healthy(3)
			f.annotate(0, v1alpha1.AnnotationGrant, "g", v1alpha1.AnnotationState, "Draining", v1alpha1.AnnotationStateGrant, "g")
			f[0].Status.Conditions = append(f[0].Status.Conditions, corev1.NodeCondition{
				Type: v1alpha1.ConditionDrained, Status: corev1.ConditionFalse, Reason: "DrainBlocked"})
			return f
		}, waitDrainBlocked},
		{"degraded holds the slot", pool(intstr.FromInt32(1)), func() fleet {
			f := healthy(3)
			f.annotate(0, v1alpha1.AnnotationGrant, "g", v1alpha1.AnnotationState, "Degraded", v1alpha1.AnnotationStateGrant, "g",
				v1alpha1.AnnotationStateTarget, "quay.io/os:2")
			return f
		}, waitDegraded},
		{"staging", pool(intstr.FromInt32(1)), func() fleet {
			f := healthy(2)
			for i := range f {
				f.annotate(i, v1alpha1.AnnotationStaged, "")
			}
			return f
		}, waitStaging},
	} {
		p, err := plan(tc.pool, tc.nodes().views(), nil, now)
		if err != nil {
			t.Fatalf("%s: %v", tc.name, err)
		}
		if p.hold.reason != tc.want {
			t.Errorf("%s: wait %q, want %q (planner: %q)", tc.name, p.hold.reason, tc.want, p.hold.message)
		}
	}
}

// TestCoordinatorMetrics: one series per reason set to 1 for the current
// one, the in-flight nodes only in nodeward_node_update_in_progress, and a
// pool's series gone with the pool.
func TestCoordinatorMetrics(t *testing.T) {
	reg := prometheus.NewRegistry()
	m := NewMetrics(reg)
	f := healthy(3)
	f.annotate(0, v1alpha1.AnnotationGrant, "g", v1alpha1.AnnotationState, "Rebooting", v1alpha1.AnnotationStateGrant, "g")
	p, err := plan(pool(intstr.FromInt32(1)), f.views(), nil, now)
	if err != nil {
		t.Fatal(err)
	}
	m.observe("p", p)
	want := `
# HELP nodeward_node_update_in_progress 1 while the node holds an update slot of the pool (a planned drain and reboot); no series otherwise.
# TYPE nodeward_node_update_in_progress gauge
nodeward_node_update_in_progress{node="n00",pool="p"} 1
# HELP nodeward_pool_max_unavailable The pool's maxUnavailable resolved to a node count: the most nodes counted unavailable at once.
# TYPE nodeward_pool_max_unavailable gauge
nodeward_pool_max_unavailable{pool="p"} 1
# HELP nodeward_pool_nodes Nodes of the pool by state: total (the pool selects), updated (run the target), updating (hold a slot), degraded (failed on the target).
# TYPE nodeward_pool_nodes gauge
nodeward_pool_nodes{pool="p",state="degraded"} 0
nodeward_pool_nodes{pool="p",state="total"} 3
nodeward_pool_nodes{pool="p",state="updated"} 0
nodeward_pool_nodes{pool="p",state="updating"} 1
# HELP nodeward_pool_waiting_nodes Nodes of the pool that need the target and hold no slot.
# TYPE nodeward_pool_waiting_nodes gauge
nodeward_pool_waiting_nodes{pool="p"} 2
# HELP nodeward_update_grants_total Update slots granted, by pool.
# TYPE nodeward_update_grants_total counter
nodeward_update_grants_total{pool="p"} 0
`
	if err := testutil.GatherAndCompare(reg, strings.NewReader(want), "nodeward_node_update_in_progress",
		"nodeward_pool_waiting_nodes", "nodeward_update_grants_total", "nodeward_pool_nodes", "nodeward_pool_max_unavailable"); err != nil {
		t.Fatal(err)
	}
	for _, r := range waitReasons() {
		wantV := 0.0
		if r == waitLimitReached {
			wantV = 1
		}
		if got := testutil.ToFloat64(m.waiting.WithLabelValues("p", string(r))); got != wantV {
			t.Errorf("nodeward_pool_waiting{reason=%q} = %v, want %v", r, got, wantV)
		}
	}

	// n00 is done and released; n01 is granted in this pass.
	f.annotate(0, v1alpha1.AnnotationGrant, "", v1alpha1.AnnotationState, "Done", v1alpha1.AnnotationStateTarget, "quay.io/os:2")
	p, _ = plan(pool(intstr.FromInt32(1)), f.views(), nil, now)
	m.observe("p", p)
	want = `
# HELP nodeward_node_update_in_progress 1 while the node holds an update slot of the pool (a planned drain and reboot); no series otherwise.
# TYPE nodeward_node_update_in_progress gauge
nodeward_node_update_in_progress{node="n01",pool="p"} 1
`
	if err := testutil.GatherAndCompare(reg, strings.NewReader(want), "nodeward_node_update_in_progress"); err != nil {
		t.Fatal(err)
	}
	if got := testutil.ToFloat64(m.nodes.WithLabelValues("p", "updated")); got != 1 {
		t.Errorf("after n00's update: nodeward_pool_nodes{state=\"updated\"} = %v, want 1", got)
	}
	if got := testutil.ToFloat64(m.waiting.WithLabelValues("p", string(waitNone))); got != 1 {
		t.Errorf("granting pool: reason none = %v, want 1", got)
	}

	m.forget("p")
	if n := testutil.CollectAndCount(reg); n != 0 {
		t.Fatalf("after the pool is gone: %d series left, want 0", n)
	}
}
