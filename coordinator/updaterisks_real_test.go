package coordinator_test

import (
	"context"
	"encoding/json"
	"fmt"
	"strings"
	"testing"
	"time"

	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/nodeward/nodeward/api/v1alpha1"
	"github.com/nodeward/nodeward/test/cluster"
	"github.com/nodeward/nodeward/test/prom"
)

// riskyGraph is a two-release graph whose one edge is conditional: 1.0.0 →
// 1.1.0 under a risk named risk whose one rule is promql. It returns the
// graph's JSON and the two releases' digest-pinned images.
func riskyGraph(t *testing.T, risk, promql string) (data []byte, from, to string) {
	t.Helper()
	from = "registry.example/os@sha256:" + strings.Repeat("a", 64)
	to = "registry.example/os@sha256:" + strings.Repeat("b", 64)
	g := map[string]any{
		"nodes": []any{
			map[string]any{"version": "1.0.0", "payload": from, "metadata": map[string]any{}},
			map[string]any{"version": "1.1.0", "payload": to, "metadata": map[string]any{}},
		},
		"edges": []any{},
		"conditionalEdges": []any{map[string]any{
			"edges": []any{map[string]any{"from": "1.0.0", "to": "1.1.0"}},
			"risks": []any{map[string]any{"name": risk, "message": "the " + risk + " risk", "url": "https://risks.example/" + risk,
				"matchingRules": []any{map[string]any{"type": "PromQL", "promql": map[string]any{"promql": promql}}}}},
		}},
	}
	data, err := json.Marshal(g)
	if err != nil {
		t.Fatal(err)
	}
	return data, from, to
}

// TestUpdateRisksOnARealPrometheus: Automatic pools whose one next hop is
// conditional, its risk's rule asked of a real Prometheus through the
// pool's updateSource.prometheus, as the cluster version operator asks its own.
// Exposed (the rule returns 1): Recommended False naming the risk, and the
// pool stays. A rule that returns two samples: Unknown EvaluationFailed,
// and the pool stays. Not exposed (0): Recommended True NotExposedToRisks,
// and the pool moves to the hop and rolls it out.
func TestUpdateRisksOnARealPrometheus(t *testing.T) {
	t.Parallel()
	cp, dyn := setup(t)
	target := prom.NewTarget(t)
	target.Set("nodeward_test_risk", map[string]string{"cluster": "exposed"}, 1)
	target.Set("nodeward_test_risk", map[string]string{"cluster": "safe"}, 0)
	p8s := prom.StartPrometheus(t, prom.PrometheusOptions{Targets: []string{target.Addr()}})
	p8s.WaitValue(t, `count(nodeward_test_risk)`, 2, time.Minute)
	ctx, cancel := context.WithCancel(context.Background())
	t.Cleanup(cancel) // after the parallel subtests, which run once this function returns
	for _, c := range []struct {
		prefix, promql, status, reason string
		moves                          bool
	}{
		{"riskexposed", `max(nodeward_test_risk{cluster="exposed"})`, "False", "Exposed", false},
		{"riskfails", `nodeward_test_risk`, "Unknown", "EvaluationFailed", false},
		// Recommended True is taken at once: the move itself says so.
		{"risksafe", `max(nodeward_test_risk{cluster="safe"})`, "", "", true},
	} {
		renewLeases(t, cp, cp.CreateNodes(t, cluster.NodeSpec{Prefix: c.prefix, Count: 2}))
		simulateAgents(ctx, t, cp, c.prefix, 100*time.Millisecond)
		data, from, to := riskyGraph(t, "Exposed", c.promql)
		srv := newGraphServer(t, data)
		pool := sourcedPool(c.prefix, from, v1alpha1.UpdateSource{URL: srv.URL, Dialect: v1alpha1.OpenShiftGraph,
			Channel: "stable-1", Policy: v1alpha1.AutomaticUpdates, Prometheus: p8s.URL}, 1)
		createPool(t, dyn, c.prefix, pool)
		targets := targetsOf(ctx, t, dyn, c.prefix)
		runCoordinator(ctx, t, cp, dyn, c.prefix, fastFetches)
		c, to, targets := c, to, targets
		t.Run(c.prefix, func(t *testing.T) {
			t.Parallel()
			if !c.moves {
				waitPool(t, dyn, c.prefix, "1.1.0 Recommended "+c.status+" "+c.reason, time.Minute, recommendedIs(c.status, c.reason))
				// Evaluated and not recommended: the pool must not move in
				// the passes that follow (one a second), as its watch sees.
				select {
				case <-ctx.Done():
				case <-time.After(3 * time.Second):
				}
				if got := targets(); len(got) != 1 {
					t.Errorf("pool %s moved %v on an update not recommended", c.prefix, got)
				}
				return
			}
			waitPool(t, dyn, c.prefix, "1.1.0 rolled out", 2*time.Minute, func(p *v1alpha1.UpdatePool) error {
				if p.Spec.OSImage != to || p.Status.UpdatedMachineCount != 2 {
					return fmt.Errorf("target %s, %d of 2 updated", p.Spec.OSImage, p.Status.UpdatedMachineCount)
				}
				return nil
			})
		})
	}
}

// recommendedIs checks the one conditional update's Recommended condition.
func recommendedIs(status, reason string) func(*v1alpha1.UpdatePool) error {
	return func(p *v1alpha1.UpdatePool) error {
		u := p.Status.Updates
		if u == nil || len(u.Conditional) != 1 {
			return fmt.Errorf("updates %+v, want one conditional update", u)
		}
		c := meta.FindStatusCondition(u.Conditional[0].Conditions, v1alpha1.UpdateRecommended)
		if c == nil || string(c.Status) != status || c.Reason != reason {
			return fmt.Errorf("Recommended %+v, want %s %s", c, status, reason)
		}
		if status == string(metav1.ConditionFalse) && !strings.Contains(c.Message, "https://risks.example/Exposed") {
			return fmt.Errorf("Recommended message %q does not link the risk", c.Message)
		}
		return nil
	}
}
