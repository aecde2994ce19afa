package coordinator_test

import (
	"context"
	"encoding/json"
	"fmt"
	"os"
	"strings"
	"testing"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/dynamic"
	"k8s.io/utils/ptr"
	"sigs.k8s.io/yaml"

	"github.com/nodeward/nodeward/api/v1alpha1"
	"github.com/nodeward/nodeward/test/cluster"
	"github.com/nodeward/nodeward/test/prom"
)

// unhealthyRule fires NodewardTestUnhealthy for every test series at 1.
const unhealthyRule = `groups:
- name: nodeward-test
  interval: 1s
  rules:
  - alert: NodewardTestUnhealthy
    expr: nodeward_test_unhealthy > 0
    labels: {severity: critical}
`

// promWithTarget runs a real Prometheus scraping a target whose series the
// test flips, with the rule above.
func promWithTarget(t *testing.T) (*prom.Prometheus, *prom.Target) {
	t.Helper()
	target := prom.NewTarget(t)
	p := prom.StartPrometheus(t, prom.PrometheusOptions{Targets: []string{target.Addr()}, Rules: unhealthyRule})
	return p, target
}

// waitPoolConditionIs waits until the pool's condition typ has status and
// reason.
func waitPoolConditionIs(t *testing.T, dyn dynamic.Interface, pool, typ, status, reason string, timeout time.Duration) string {
	t.Helper()
	var msg string
	cluster.WaitFor(t, timeout, fmt.Sprintf("pool %s condition %s=%s (%s)", pool, typ, status, reason), func(ctx context.Context) (bool, error) {
		c, err := poolCondition(ctx, dyn, pool, typ)
		if err != nil {
			return false, err
		}
		msg, _ = c["message"].(string)
		return c["status"] == status && c["reason"] == reason, fmt.Errorf("%v (%v): %v", c["status"], c["reason"], msg)
	})
	return msg
}

// noGrantFor fails the test if a grant arrives within d.
func (a *agents) noGrantFor(t *testing.T, d time.Duration, why string) {
	t.Helper()
	select {
	case g := <-a.grants:
		t.Fatalf("%s granted %s", g.node, why)
	case <-time.After(d):
	}
}

// TestFiringAlertHoldsThePool: a firing alert the gate selects holds every
// grant, the pool's GatesPassing names it, and the rollout goes on once it
// resolves; an alert the selector does not match never held it.
func TestFiringAlertHoldsThePool(t *testing.T) {
	t.Parallel()
	const prefix = "gatealert"
	p, target := promWithTarget(t)
	target.Set("nodeward_test_unhealthy", map[string]string{"team": "storage"}, 1)
	p.WaitAlert(t, "NodewardTestUnhealthy", "firing", time.Minute)
	r := newRig(t, prefix, 2, 1)
	createPool(t, r.dyn, prefix, &v1alpha1.UpdatePool{ObjectMeta: metav1.ObjectMeta{Name: prefix}, Spec: v1alpha1.UpdatePoolSpec{
		NodeSelector: groupSelector(prefix), OSImage: "os:ga1", MaxUnavailable: ptr.To(intstrInt(1)),
		Gates: &v1alpha1.Gates{Prometheus: p.URL, Alerts: &metav1.LabelSelector{MatchLabels: map[string]string{"severity": "critical"}}},
	}})
	runCoordinator(r.ctx, t, r.cp, r.dyn, prefix)
	msg := waitPoolConditionIs(t, r.dyn, prefix, v1alpha1.PoolGatesPassing, "False", "AlertFiring", time.Minute)
	if !strings.Contains(msg, "NodewardTestUnhealthy") {
		t.Errorf("GatesPassing message %q does not name the alert", msg)
	}
	waitPoolCondition(t, r.dyn, prefix, v1alpha1.PoolUpdating, 30*time.Second, "gates failing", "NodewardTestUnhealthy")
	r.agents.noGrantFor(t, 3*time.Second, "while the alert fires")

	target.Set("nodeward_test_unhealthy", map[string]string{"team": "storage"}, 0)
	for range 2 {
		r.agents.mustReport(r.ctx, t, r.agents.next(t, time.Minute), v1alpha1.StepDone)
	}
	waitUpdated(t, r.cp, r.dyn, prefix, 2, 30*time.Second)
	waitPoolConditionIs(t, r.dyn, prefix, v1alpha1.PoolGatesPassing, "True", "GatesPassing", 30*time.Second)
}

// TestGatesFailClosed: an unreachable Prometheus and a bad PromQL query
// each hold the pool, with a reason that says which.
func TestGatesFailClosed(t *testing.T) {
	t.Parallel()
	p, _ := promWithTarget(t)
	ports, err := cluster.FreePorts(1)
	if err != nil {
		t.Fatal(err)
	}
	for _, tc := range []struct {
		name, reason, want string
		gates              *v1alpha1.Gates
	}{
		{"failclosed-down", "PrometheusUnreachable", fmt.Sprint(ports[0]),
			&v1alpha1.Gates{Prometheus: fmt.Sprintf("http://127.0.0.1:%d", ports[0]), Alerts: &metav1.LabelSelector{}}},
		{"failclosed-promql", "QueryInvalid", "broken",
			&v1alpha1.Gates{Prometheus: p.URL, Queries: []v1alpha1.GateQuery{{Name: "broken", Query: "sum(rate(x[5m]"}}}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			r := newRig(t, tc.name, 2, 1)
			createPool(t, r.dyn, tc.name, &v1alpha1.UpdatePool{ObjectMeta: metav1.ObjectMeta{Name: tc.name}, Spec: v1alpha1.UpdatePoolSpec{
				NodeSelector: groupSelector(tc.name), OSImage: "os:fc1", MaxUnavailable: ptr.To(intstrInt(1)), Gates: tc.gates,
			}})
			runCoordinator(r.ctx, t, r.cp, r.dyn, tc.name)
			msg := waitPoolConditionIs(t, r.dyn, tc.name, v1alpha1.PoolGatesPassing, "False", tc.reason, time.Minute)
			if !strings.Contains(msg, tc.want) {
				t.Errorf("GatesPassing message %q does not name %q", msg, tc.want)
			}
			r.agents.noGrantFor(t, 3*time.Second, "with the gates failing closed")
		})
	}
}

// TestSoakCatchesAGateFailingAfterDone: the first node reports Done and
// keeps its slot for the soak; the query gate fails meanwhile; the pool
// halts, nothing more is granted, and removing the halt (nodeward resume)
// lets the rollout finish.
func TestSoakCatchesAGateFailingAfterDone(t *testing.T) {
	t.Parallel()
	const prefix = "soak"
	p, target := promWithTarget(t)
	target.Set("nodeward_test_errors", map[string]string{"app": "web"}, 0)
	r := newRig(t, prefix, 3, 1)
	createPool(t, r.dyn, prefix, &v1alpha1.UpdatePool{ObjectMeta: metav1.ObjectMeta{Name: prefix}, Spec: v1alpha1.UpdatePoolSpec{
		NodeSelector: groupSelector(prefix), OSImage: "os:so1", MaxUnavailable: ptr.To(intstrInt(1)), Soak: "2m",
		Gates: &v1alpha1.Gates{Prometheus: p.URL, Queries: []v1alpha1.GateQuery{
			{Name: "web-errors", Query: `sum(nodeward_test_errors{app="web"})`, Max: ptr.To("0")}}},
	}})
	runCoordinator(r.ctx, t, r.cp, r.dyn, prefix)
	first := r.agents.next(t, time.Minute)
	r.agents.mustReport(r.ctx, t, first, v1alpha1.StepDone)
	waitAnnotationSet(t, r.cp, first.node, v1alpha1.AnnotationSoakUntil, 30*time.Second)
	waitPoolCondition(t, r.dyn, prefix, v1alpha1.PoolUpdating, 30*time.Second, first.node+" (soaking until")
	r.agents.noGrantFor(t, 2*time.Second, "while the first node soaks")

	target.Set("nodeward_test_errors", map[string]string{"app": "web"}, 3)
	msg := waitPoolConditionIs(t, r.dyn, prefix, v1alpha1.PoolHalted, "True", "GateFailedWhileSoaking", time.Minute)
	for _, want := range []string{first.node, "web-errors"} {
		if !strings.Contains(msg, want) {
			t.Errorf("Halted message %q does not name %q", msg, want)
		}
	}
	waitAnnotation(t, r.cp, first.node, v1alpha1.AnnotationGrant, "", 30*time.Second)
	target.Set("nodeward_test_errors", map[string]string{"app": "web"}, 0)
	r.agents.noGrantFor(t, 3*time.Second, "while the pool is halted, the gate passing again")

	patchPoolAnnotations(r.ctx, t, r.dyn, prefix, map[string]any{v1alpha1.AnnotationHalted: nil})
	patchPool(r.ctx, t, r.dyn, prefix, map[string]any{"soak": nil})
	for range 2 {
		r.agents.mustReport(r.ctx, t, r.agents.next(t, time.Minute), v1alpha1.StepDone)
	}
	waitUpdated(t, r.cp, r.dyn, prefix, 3, 30*time.Second)
}

// TestCanaryFailureHaltsBeforeAnyOtherNode: the one canary fails; the pool
// halts with CanaryFailed and no other node is ever granted; a canary that
// succeeds bakes, and only then does the pool go on at maxUnavailable.
func TestCanaryFailureHaltsBeforeAnyOtherNode(t *testing.T) {
	t.Parallel()
	const prefix = "canary"
	r := newRig(t, prefix, 4, 3)
	createPool(t, r.dyn, prefix, &v1alpha1.UpdatePool{ObjectMeta: metav1.ObjectMeta{Name: prefix}, Spec: v1alpha1.UpdatePoolSpec{
		NodeSelector: groupSelector(prefix), OSImage: "os:ca1", MaxUnavailable: ptr.To(intstrInt(3)),
		Canary: &v1alpha1.Canary{Nodes: ptr.To(intstrInt(1)), Bake: "3s"},
	}})
	runCoordinator(r.ctx, t, r.cp, r.dyn, prefix)
	canary := r.agents.next(t, time.Minute)
	r.agents.mustReport(r.ctx, t, canary, v1alpha1.StepDegraded)
	waitPoolConditionIs(t, r.dyn, prefix, v1alpha1.PoolHalted, "True", "CanaryFailed", 30*time.Second)
	r.agents.noGrantFor(t, 3*time.Second, "after the canary failed")
	noGrantBut(r.ctx, t, r.cp, r.nodes, canary.node, "after the canary failed")

	// A new target: the canary runs again, succeeds and bakes.
	patchPool(r.ctx, t, r.dyn, prefix, map[string]any{"osImage": "os:ca2"})
	canary = r.agents.next(t, time.Minute)
	r.agents.noGrantFor(t, time.Second, "while the canary updates")
	r.agents.mustReport(r.ctx, t, canary, v1alpha1.StepDone)
	waitAnnotationSet(t, r.cp, canary.node, v1alpha1.AnnotationSoakUntil, 30*time.Second)
	bakeStart := time.Now()
	rest := []grantEvent{r.agents.next(t, time.Minute)}
	if since := time.Since(bakeStart); since < 2*time.Second {
		t.Errorf("the next node was granted %s after the canary reported Done, before its 3 s bake", since)
	}
	for len(rest) < 3 {
		rest = append(rest, r.agents.next(t, 10*time.Second))
	}
	for _, g := range rest {
		r.agents.mustReport(r.ctx, t, g, v1alpha1.StepDone)
	}
	waitUpdated(t, r.cp, r.dyn, prefix, 4, 30*time.Second)
}

// waitAnnotationSet waits until node has annotation key, any value.
func waitAnnotationSet(t *testing.T, cp *cluster.ControlPlane, node, key string, timeout time.Duration) {
	t.Helper()
	cluster.WaitFor(t, timeout, fmt.Sprintf("node %s: %s set", node, key), func(ctx context.Context) (bool, error) {
		n, err := cp.Client().CoreV1().Nodes().Get(ctx, node, metav1.GetOptions{})
		if err != nil {
			return false, err
		}
		_, ok := n.Annotations[key]
		return ok, nil
	})
}

// patchPoolAnnotations merge-patches a pool's annotations (nil removes).
func patchPoolAnnotations(ctx context.Context, t *testing.T, dyn dynamic.Interface, pool string, set map[string]any) {
	t.Helper()
	patch, _ := json.Marshal(map[string]any{"metadata": map[string]any{"annotations": set}})
	if _, err := dyn.Resource(v1alpha1.UpdatePoolResource()).Patch(ctx, pool, types.MergePatchType, patch, metav1.PatchOptions{}); err != nil {
		t.Fatalf("patch annotations of pool %s: %v", pool, err)
	}
}

// TestGuardrailFieldsAreValidated: the API server refuses each bad field
// of gates (the object gates' CEL itself excepted: the coordinator
// reports it, TestObjectGateExpressionNeverTakenForTrue), soak, canary,
// silences and failureBudget, and its message names the field; nothing is
// stored.
func TestGuardrailFieldsAreValidated(t *testing.T) {
	t.Parallel()
	_, dyn := setup(t)
	good := func() map[string]any {
		return map[string]any{"nodeSelector": map[string]any{"matchLabels": map[string]any{"x": "y"}}, "osImage": "os:v1"}
	}
	for i, tc := range []struct {
		field string
		value any
		want  string
	}{
		{"soak", "ten minutes", "soak must be a Go duration"},
		{"soak", "-5m", "soak must be a Go duration"},
		{"failureBudget", 0, "failureBudget must be an integer of at least 1"},
		{"failureBudget", "150%", "failureBudget must be an integer of at least 1"},
		{"gates", map[string]any{"prometheus": "prometheus:9090", "alerts": map[string]any{}}, "spec.gates.prometheus"},
		{"gates", map[string]any{"prometheus": "http://p:9090"}, "gates needs alerts, queries or objects"},
		{"gates", map[string]any{"alerts": map[string]any{}}, "gates.prometheus is required with alerts or queries"},
		{"gates", map[string]any{"objects": []any{map[string]any{"version": "v1", "resource": "configmaps", "expression": "true",
			"name": "x", "selector": map[string]any{}}}}, "an object gate takes name or selector, not both"},
		{"gates", map[string]any{"objects": []any{map[string]any{"version": "v1", "resource": "configmaps"}}}, "spec.gates.objects[0].expression"},
		{"gates", map[string]any{"prometheus": "http://p:9090", "queries": []any{map[string]any{"name": "q", "query": "up", "min": "abc"}}}, "spec.gates.queries[0].min"},
		{"gates", map[string]any{"prometheus": "http://p:9090", "queries": []any{map[string]any{"name": "q", "query": "up", "min": "2", "max": "1"}}}, "min must not be above max"},
		{"gates", map[string]any{"prometheus": "http://p:9090", "alerts": map[string]any{}, "timeout": "forever"}, "gates.timeout must be a positive Go duration"},
		{"canary", map[string]any{"nodes": 2}, "spec.canary.bake"},
		{"canary", map[string]any{"nodes": "0%", "bake": "1m"}, "canary.nodes must be an integer of at least 1"},
		{"canary", map[string]any{"nodes": 1, "selector": map[string]any{}, "bake": "1m"}, "canary takes nodes or selector, not both"},
		{"canary", map[string]any{"bake": "0s"}, "canary.bake must be a positive Go duration"},
		{"silences", map[string]any{"alertmanager": "http://am:9093", "nodeLabel": "bad-label"}, "spec.silences.nodeLabel"},
		{"silences", map[string]any{"nodeLabel": "instance"}, "spec.silences.alertmanager"},
	} {
		spec := good()
		spec[tc.field] = tc.value
		name := fmt.Sprintf("invalid-guardrail-%d", i)
		obj := &unstructured.Unstructured{Object: map[string]any{"apiVersion": v1alpha1.GroupName + "/" + v1alpha1.Version,
			"kind": "UpdatePool", "metadata": map[string]any{"name": name}, "spec": spec}}
		_, err := dyn.Resource(v1alpha1.UpdatePoolResource()).Create(context.Background(), obj, metav1.CreateOptions{})
		if err == nil {
			_ = dyn.Resource(v1alpha1.UpdatePoolResource()).Delete(context.Background(), name, metav1.DeleteOptions{})
			t.Errorf("%s %v: accepted", tc.field, tc.value)
			continue
		}
		if !strings.Contains(err.Error(), tc.want) {
			t.Errorf("%s %v: error %q does not say %q", tc.field, tc.value, err, tc.want)
		}
	}
}

// TestSilenceExistsWhileEachNodeIsUnavailable: with a real Alertmanager,
// each node's silence is there when its grant is (made first), silences
// the node's alerts by its instance label, and is expired once the node
// reports Done; no other node is ever silenced.
func TestSilenceExistsWhileEachNodeIsUnavailable(t *testing.T) {
	t.Parallel()
	const prefix = "silence"
	am := prom.StartAlertmanager(t)
	r := newRig(t, prefix, 2, 1)
	createPool(t, r.dyn, prefix, &v1alpha1.UpdatePool{ObjectMeta: metav1.ObjectMeta{Name: prefix}, Spec: v1alpha1.UpdatePoolSpec{
		NodeSelector: groupSelector(prefix), OSImage: "os:si1", MaxUnavailable: ptr.To(intstrInt(1)),
		Silences: &v1alpha1.Silences{Alertmanager: am.URL, NodeLabel: "instance"},
	}})
	silenced := func(node string) bool {
		for _, s := range am.Silences(t) {
			if s.State == "active" && s.CreatedBy == "nodeward-coordinator" && strings.Contains(s.Comment, "node="+node+":") {
				return true
			}
		}
		return false
	}
	runCoordinator(r.ctx, t, r.cp, r.dyn, prefix)
	for range 2 {
		g := r.agents.next(t, time.Minute)
		if !silenced(g.node) {
			t.Errorf("%s granted without an active silence", g.node)
		}
		alert := map[string]string{"alertname": "NodewardTestNodeDown", "instance": g.node + ":9100"}
		am.PostAlert(t, alert)
		if state, by, found := am.AlertStatus(t, alert); !found || state != "suppressed" || len(by) == 0 {
			t.Errorf("alert of %s while it updates: state %q, silenced by %v (found %t); want suppressed", g.node, state, by, found)
		}
		for _, n := range r.nodes {
			if n != g.node && silenced(n) {
				t.Errorf("%s silenced while %s updates", n, g.node)
			}
		}
		r.agents.mustReport(r.ctx, t, g, v1alpha1.StepDone)
		cluster.WaitFor(t, 30*time.Second, g.node+"'s silence expired after Done", func(context.Context) (bool, error) {
			return !silenced(g.node), nil
		})
	}
	waitPoolConditionIs(t, r.dyn, prefix, v1alpha1.PoolSilenced, "True", "NoneNeeded", 30*time.Second)
}

// TestSilenceFailureIsReportedAndRequiredHolds: an unreachable
// Alertmanager is reported (Silenced=False) and the update goes on;
// with silences.required, nothing is granted until a silence exists.
func TestSilenceFailureIsReportedAndRequiredHolds(t *testing.T) {
	t.Parallel()
	ports, err := cluster.FreePorts(1)
	if err != nil {
		t.Fatal(err)
	}
	down := fmt.Sprintf("http://127.0.0.1:%d", ports[0])
	for _, required := range []bool{false, true} {
		name := fmt.Sprintf("silence-required-%t", required)
		t.Run(name, func(t *testing.T) {
			t.Parallel()
			r := newRig(t, name, 2, 1)
			createPool(t, r.dyn, name, &v1alpha1.UpdatePool{ObjectMeta: metav1.ObjectMeta{Name: name}, Spec: v1alpha1.UpdatePoolSpec{
				NodeSelector: groupSelector(name), OSImage: "os:sr1", MaxUnavailable: ptr.To(intstrInt(1)),
				Silences: &v1alpha1.Silences{Alertmanager: down, Required: required},
			}})
			runCoordinator(r.ctx, t, r.cp, r.dyn, name)
			msg := waitPoolConditionIs(t, r.dyn, name, v1alpha1.PoolSilenced, "False", "SilenceFailed", time.Minute)
			if !strings.Contains(msg, down) {
				t.Errorf("Silenced message %q does not name %s", msg, down)
			}
			if required {
				waitPoolCondition(t, r.dyn, name, v1alpha1.PoolUpdating, 30*time.Second, "silences.required")
				r.agents.noGrantFor(t, 3*time.Second, "without its required silence")
				return
			}
			r.agents.mustReport(r.ctx, t, r.agents.next(t, time.Minute), v1alpha1.StepDone)
		})
	}
}

// TestGuardrailsExampleIsAccepted: the UpdatePool of docs/guardrails.md is
// valid as written.
func TestGuardrailsExampleIsAccepted(t *testing.T) {
	t.Parallel()
	_, dyn := setup(t)
	doc, err := os.ReadFile("../docs/guardrails.md")
	if err != nil {
		t.Fatal(err)
	}
	_, block, ok := strings.Cut(string(doc), "```yaml\n")
	block, _, ok2 := strings.Cut(block, "```")
	if !ok || !ok2 {
		t.Fatal("docs/guardrails.md has no yaml block")
	}
	var obj unstructured.Unstructured
	if err := yaml.Unmarshal([]byte(block), &obj.Object); err != nil {
		t.Fatalf("the example does not parse: %v", err)
	}
	obj.SetName("guardrails-example")
	if _, err := dyn.Resource(v1alpha1.UpdatePoolResource()).Create(context.Background(), &obj, metav1.CreateOptions{DryRun: []string{metav1.DryRunAll}}); err != nil {
		t.Fatalf("the API server refuses the example: %v", err)
	}
}
