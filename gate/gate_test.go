package gate_test

import (
	"context"
	"errors"
	"strings"
	"testing"
	"time"

	promv1 "github.com/prometheus/client_golang/api/prometheus/v1"
	"github.com/prometheus/common/model"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/nodeward/nodeward/api/v1alpha1"
	"github.com/nodeward/nodeward/gate"
	"github.com/nodeward/nodeward/test/cluster"
	"github.com/nodeward/nodeward/test/prom"
)

// rules are the alerting rules of the tests' Prometheus: one that fires as
// soon as its metric is above 0, one that stays pending for an hour.
const rules = `groups:
- name: nodeward-test
  rules:
  - alert: NodewardTestUnhealthy
    expr: nodeward_test_unhealthy > 0
    for: 0s
    labels:
      severity: critical
  - alert: NodewardTestPending
    expr: nodeward_test_pending > 0
    for: 1h
    labels:
      severity: critical
`

// settle bounds a wait for Prometheus to scrape a sample or evaluate a
// rule: both happen every second.
const settle = 30 * time.Second

// env is a real Prometheus scraping one Target, shared by a test's
// subtests; each subtest uses series of its own so that they may run in
// parallel.
type env struct {
	prom   *prom.Prometheus
	target *prom.Target
	ev     *gate.Evaluator
}

func startEnv(t testing.TB) env {
	target := prom.NewTarget(t)
	// Set before the first scrape, so that no series starts out missing.
	target.Set("nodeward_test_unhealthy", nil, 0)
	target.Set("nodeward_test_pending", nil, 0)
	target.Set("nodeward_test_value", map[string]string{"case": "bounds"}, 5)
	target.Set("nodeward_test_value", map[string]string{"case": "multi", "a": "1"}, 1)
	target.Set("nodeward_test_value", map[string]string{"case": "multi", "a": "2"}, 2)
	p := prom.StartPrometheus(t, prom.PrometheusOptions{Targets: []string{target.Addr()}, Rules: rules})
	return env{prom: p, target: target, ev: gate.NewEvaluator(nil)}
}

// evaluate evaluates gates, bounded by the test's deadline too.
func (e env) evaluate(t *testing.T, gates *v1alpha1.Gates) gate.Verdict {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), settle)
	defer cancel()
	return e.ev.Evaluate(ctx, gates)
}

// await evaluates gates until the verdict's reason is want.
func (e env) await(t *testing.T, gates *v1alpha1.Gates, want string) gate.Verdict {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), settle)
	defer cancel()
	var v gate.Verdict
	err := cluster.Poll(ctx, "verdict "+want, 200*time.Millisecond, nil, func(ctx context.Context) (bool, error) {
		v = e.ev.Evaluate(ctx, gates)
		return v.Reason == want, nil
	})
	if err != nil {
		t.Fatalf("%v; last verdict %+v", err, v)
	}
	return v
}

func expect(t *testing.T, v gate.Verdict, reason string, contains ...string) {
	t.Helper()
	t.Logf("%s: %s", v.Reason, v.Message)
	if v.Reason != reason || v.Passing != (reason == gate.ReasonPassing) {
		t.Fatalf("verdict %+v, want reason %s", v, reason)
	}
	for _, s := range contains {
		if !strings.Contains(v.Message, s) {
			t.Errorf("message %q does not contain %q", v.Message, s)
		}
	}
}

func str(s string) *string { return &s }

func TestAgainstPrometheus(t *testing.T) {
	t.Parallel()
	e := startEnv(t)
	t.Run("FiringAlertHoldsUntilResolved", func(t *testing.T) {
		t.Parallel()
		byName := &v1alpha1.Gates{Prometheus: e.prom.URL, Alerts: &metav1.LabelSelector{
			MatchLabels: map[string]string{"alertname": "NodewardTestUnhealthy"}}}
		everything := &v1alpha1.Gates{Prometheus: e.prom.URL, Alerts: &metav1.LabelSelector{}}
		bySeverity := &v1alpha1.Gates{Prometheus: e.prom.URL, Alerts: &metav1.LabelSelector{
			MatchExpressions: []metav1.LabelSelectorRequirement{{Key: "severity", Operator: metav1.LabelSelectorOpIn, Values: []string{"critical", "page"}}}}}
		other := &v1alpha1.Gates{Prometheus: e.prom.URL, Alerts: &metav1.LabelSelector{
			MatchLabels: map[string]string{"severity": "page"}}}
		unchecked := &v1alpha1.Gates{Prometheus: e.prom.URL}

		e.prom.WaitValue(t, "nodeward_test_unhealthy", 0, settle)
		expect(t, e.evaluate(t, byName), gate.ReasonPassing, e.prom.URL)

		e.target.Set("nodeward_test_unhealthy", nil, 1)
		v := e.await(t, byName, gate.ReasonAlertFiring)
		expect(t, v, gate.ReasonAlertFiring, `alert NodewardTestUnhealthy{`, `severity="critical"`, `job="nodeward-test"`, "firing since", e.prom.URL)
		expect(t, e.evaluate(t, everything), gate.ReasonAlertFiring, "NodewardTestUnhealthy")
		expect(t, e.evaluate(t, bySeverity), gate.ReasonAlertFiring, "NodewardTestUnhealthy")
		expect(t, e.evaluate(t, other), gate.ReasonPassing)
		expect(t, e.evaluate(t, unchecked), gate.ReasonPassing, "alerts not checked")
		// Alerts are checked first: a bad query behind them is not reached.
		withQuery := *byName
		withQuery.Queries = []v1alpha1.GateQuery{{Name: "invalid", Query: "sum("}}
		expect(t, e.evaluate(t, &withQuery), gate.ReasonAlertFiring)

		e.target.Set("nodeward_test_unhealthy", nil, 0)
		e.await(t, byName, gate.ReasonPassing)
	})
	t.Run("PendingAlertDoesNotHold", func(t *testing.T) {
		t.Parallel()
		e.target.Set("nodeward_test_pending", nil, 1)
		e.prom.WaitAlert(t, "NodewardTestPending", promv1.AlertStatePending, settle)
		gates := &v1alpha1.Gates{Prometheus: e.prom.URL, Alerts: &metav1.LabelSelector{
			MatchLabels: map[string]string{"alertname": "NodewardTestPending"}}}
		expect(t, e.evaluate(t, gates), gate.ReasonPassing)
	})
	t.Run("Queries", func(t *testing.T) {
		t.Parallel()
		e.prom.WaitValue(t, `nodeward_test_value{case="bounds"}`, 5, settle)
		e.prom.WaitValue(t, `count(nodeward_test_value{case="multi"})`, 2, settle)
		const value = `nodeward_test_value{case="bounds"}`
		for _, tc := range []struct {
			name     string
			query    v1alpha1.GateQuery
			reason   string
			contains []string
		}{
			{"WithinBounds", v1alpha1.GateQuery{Query: value, Min: str("0"), Max: str("5")}, gate.ReasonPassing, nil},
			{"Unbounded", v1alpha1.GateQuery{Query: value}, gate.ReasonPassing, nil},
			{"AboveMax", v1alpha1.GateQuery{Query: value, Max: str("4.5")}, gate.ReasonQueryOutOfBounds,
				[]string{`query "AboveMax" (` + value + `)`, `case="bounds"`, "= 5", "want at most 4.5"}},
			{"BelowMin", v1alpha1.GateQuery{Query: value, Min: str("6")}, gate.ReasonQueryOutOfBounds,
				[]string{`"BelowMin"`, "= 5", "want at least 6"}},
			{"Empty", v1alpha1.GateQuery{Query: value + " > 100"}, gate.ReasonQueryEmpty,
				[]string{`query "Empty" (` + value + ` > 100)`, "no samples"}},
			{"BadPromQL", v1alpha1.GateQuery{Query: "sum("}, gate.ReasonQueryInvalid,
				[]string{`query "BadPromQL" (sum()`, "bad_data", "parse error"}},
			{"ExecutionError", v1alpha1.GateQuery{Query: `nodeward_test_value{case="multi"} + on(case) nodeward_test_value{case="multi"}`},
				gate.ReasonQueryFailed, []string{`"ExecutionError"`, "execution"}},
			{"Matrix", v1alpha1.GateQuery{Query: value + "[1m]"}, gate.ReasonQueryInvalid, []string{"matrix"}},
			{"String", v1alpha1.GateQuery{Query: `"up"`}, gate.ReasonQueryInvalid, []string{"string"}},
			{"Vector1", v1alpha1.GateQuery{Query: "vector(1)", Min: str("1"), Max: str("1")}, gate.ReasonPassing, nil},
			{"ScalarWithinBounds", v1alpha1.GateQuery{Query: "scalar(" + value + ")", Min: str("5"), Max: str("5")}, gate.ReasonPassing, nil},
			{"ScalarOutOfBounds", v1alpha1.GateQuery{Query: "scalar(" + value + ")", Max: str("1")}, gate.ReasonQueryOutOfBounds,
				[]string{`"ScalarOutOfBounds"`, "scalar 5", "want at most 1"}},
			// scalar() of no sample is NaN: a sample, but in no bound.
			{"NaNUnbounded", v1alpha1.GateQuery{Query: `scalar(nodeward_test_value{case="none"})`}, gate.ReasonPassing, nil},
			{"NaNBounded", v1alpha1.GateQuery{Query: `scalar(nodeward_test_value{case="none"})`, Min: str("0")}, gate.ReasonQueryOutOfBounds,
				[]string{"scalar NaN"}},
			{"EverySampleBounded", v1alpha1.GateQuery{Query: `nodeward_test_value{case="multi"}`, Max: str("1")}, gate.ReasonQueryOutOfBounds,
				[]string{`a="2"`, "= 2"}},
			{"FirstOfSeveralNamed", v1alpha1.GateQuery{Query: `nodeward_test_value{case="multi"}`, Min: str("3")}, gate.ReasonQueryOutOfBounds,
				[]string{`a="1"`, "= 1", "and 1 more of 2 samples"}},
		} {
			t.Run(tc.name, func(t *testing.T) {
				t.Parallel()
				tc.query.Name = tc.name
				v := e.evaluate(t, &v1alpha1.Gates{Prometheus: e.prom.URL, Queries: []v1alpha1.GateQuery{tc.query}})
				expect(t, v, tc.reason, tc.contains...)
			})
		}
	})
	t.Run("Instant", func(t *testing.T) {
		t.Parallel()
		e.prom.WaitValue(t, `count(nodeward_test_value{case="multi"})`, 2, settle)
		ctx := context.Background()
		value, err := e.ev.Instant(ctx, e.prom.URL, `nodeward_test_value{case="multi"}`, settle)
		if err != nil {
			t.Fatalf("Instant: %v", err)
		}
		if v, ok := value.(model.Vector); !ok || len(v) != 2 {
			t.Fatalf("Instant returned %v, want a vector of the 2 samples", value)
		}
		value, err = e.ev.Instant(ctx, e.prom.URL, "scalar(vector(1))", settle)
		if s, ok := value.(*model.Scalar); err != nil || !ok || s.Value != 1 {
			t.Fatalf("Instant = %v, %v; want the scalar 1", value, err)
		}
		_, err = e.ev.Instant(ctx, e.prom.URL, "sum(", settle)
		var qerr *gate.QueryError
		if !errors.As(err, &qerr) || qerr.Reason != gate.ReasonQueryInvalid || !strings.Contains(qerr.Message, `run query "sum("`) {
			t.Fatalf("Instant of bad PromQL: %v, want a QueryError QueryInvalid naming the query", err)
		}
	})
	t.Run("FirstFailingQueryDecides", func(t *testing.T) {
		t.Parallel()
		e.prom.WaitValue(t, `nodeward_test_value{case="bounds"}`, 5, settle)
		gates := &v1alpha1.Gates{Prometheus: e.prom.URL, Queries: []v1alpha1.GateQuery{
			{Name: "ok", Query: "vector(1)"},
			{Name: "empty", Query: `nodeward_test_value{case="none"}`},
			{Name: "invalid", Query: "sum("},
		}}
		expect(t, e.evaluate(t, gates), gate.ReasonQueryEmpty, `query "empty"`)
		gates.Queries = gates.Queries[:1]
		expect(t, e.evaluate(t, gates), gate.ReasonPassing, "1 query passing")
	})
}

func BenchmarkEvaluate(b *testing.B) {
	e := startEnv(b)
	e.prom.WaitValue(b, `nodeward_test_value{case="bounds"}`, 5, settle)
	gates := &v1alpha1.Gates{
		Prometheus: e.prom.URL,
		Alerts:     &metav1.LabelSelector{MatchLabels: map[string]string{"severity": "critical"}},
		Queries: []v1alpha1.GateQuery{
			{Name: "value", Query: `nodeward_test_value{case="bounds"}`, Min: str("0"), Max: str("10")},
			{Name: "count", Query: `count(nodeward_test_value)`, Min: str("1")},
		},
	}
	b.Run("AlertsAnd2Queries", func(b *testing.B) {
		b.ReportAllocs()
		ctx := context.Background()
		for b.Loop() {
			if v := e.ev.Evaluate(ctx, gates); !v.Passing {
				b.Fatalf("verdict %+v", v)
			}
		}
	})
}
