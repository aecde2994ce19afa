package updaterisk_test

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"testing"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/nodeward/nodeward/test/cluster"
	"github.com/nodeward/nodeward/test/prom"
	"github.com/nodeward/nodeward/updategraph"
	"github.com/nodeward/nodeward/updaterisk"
)

// settle bounds a wait for Prometheus to scrape the target (each second).
const settle = 30 * time.Second

// series is what the tests' target serves: nodeward_risk{case=...}.
var series = []struct {
	labels map[string]string
	value  float64
}{
	{map[string]string{"case": "exposed"}, 1},
	{map[string]string{"case": "clear"}, 0},
	{map[string]string{"case": "two", "a": "1"}, 1},
	{map[string]string{"case": "two", "a": "2"}, 1},
	{map[string]string{"case": "two-valued"}, 2},
}

// startPrometheus is a real Prometheus that has scraped every series.
func startPrometheus(t testing.TB) *prom.Prometheus {
	target := prom.NewTarget(t)
	for _, s := range series {
		target.Set("nodeward_risk", s.labels, s.value)
	}
	p := prom.StartPrometheus(t, prom.PrometheusOptions{Targets: []string{target.Addr()}})
	p.WaitValue(t, "count(nodeward_risk)", float64(len(series)), settle)
	return p
}

// clock is the throttle's clock, moved by the test; Prometheus keeps its
// own.
type clock struct{ t time.Time }

func (c *clock) now() time.Time          { return c.t }
func (c *clock) advance(d time.Duration) { c.t = c.t.Add(d) }

func newEvaluator(url string, throttle updaterisk.Throttle) (*updaterisk.Evaluator, *clock) {
	c := &clock{t: time.Date(2026, 11, 28, 3, 0, 0, 0, time.UTC)}
	return updaterisk.New(updaterisk.Options{Prometheus: url, Now: c.now, Throttle: throttle, QueryTimeout: settle}), c
}

func promql(q string) updategraph.MatchingRule {
	return updategraph.MatchingRule{Type: updaterisk.TypePromQL, PromQL: &updategraph.PromQLQuery{PromQL: q}}
}

func newRisk(name string, rules ...updategraph.MatchingRule) updategraph.Risk {
	return updategraph.Risk{Name: name, Message: name + " is a known bug.", URL: "https://issues.example/" + name, MatchingRules: rules}
}

func evaluate(t *testing.T, ev *updaterisk.Evaluator, candidates ...updaterisk.Candidate) updaterisk.Evaluation {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), settle)
	defer cancel()
	e, err := ev.Evaluate(ctx, candidates, nil)
	if err != nil {
		t.Fatalf("Evaluate: %v", err)
	}
	return e
}

func expect(t *testing.T, r updaterisk.Result, status metav1.ConditionStatus, reason string, contains ...string) {
	t.Helper()
	c := r.Recommended
	t.Logf("%s: Recommended=%s %s: %s", r.Version, c.Status, c.Reason, c.Message)
	if c.Type != updaterisk.ConditionRecommended || c.Status != status || c.Reason != reason {
		t.Fatalf("Recommended=%s %s, want %s %s", c.Status, c.Reason, status, reason)
	}
	for _, s := range contains {
		if !strings.Contains(c.Message, s) {
			t.Errorf("message %q does not contain %q", c.Message, s)
		}
	}
}

func queries(t *testing.T, ev *updaterisk.Evaluator) int64 {
	t.Helper()
	return ev.Stats().Queries
}

func TestRisksAgainstPrometheus(t *testing.T) {
	t.Parallel()
	p := startPrometheus(t)
	t.Run("RulesInOrder", func(t *testing.T) {
		t.Parallel()
		rulesInOrder(t, p)
	})
	one := func(name string, rules ...updategraph.MatchingRule) updaterisk.Candidate {
		return updaterisk.Candidate{Version: "4.16.1", Risks: []updategraph.Risk{newRisk(name, rules...)}}
	}
	for _, tc := range []struct {
		name      string
		candidate updaterisk.Candidate
		status    metav1.ConditionStatus
		reason    string
		contains  []string
	}{
		{"Matching", one("KernelPanicOnBoot", promql(`nodeward_risk{case="exposed"}`)),
			metav1.ConditionFalse, "KernelPanicOnBoot", []string{"KernelPanicOnBoot is a known bug. https://issues.example/KernelPanicOnBoot"}},
		{"MatchingNameNoReason", one("kernel panic", promql(`nodeward_risk{case="exposed"}`)),
			metav1.ConditionFalse, updaterisk.ReasonExposed, []string{"kernel panic is a known bug."}},
		{"NotMatching", one("Clear", promql(`nodeward_risk{case="clear"}`)),
			metav1.ConditionTrue, updaterisk.ReasonNotExposed, nil},
		{"BadQuery", one("Bad", promql(`sum(`)),
			metav1.ConditionUnknown, updaterisk.ReasonEvaluationFailed, []string{"update risk Bad", `matchingRules[0] (PromQL)`, `run query "sum("`, "bad_data", "Bad URL: https://issues.example/Bad"}},
		{"TwoSamples", one("Two", promql(`nodeward_risk{case="two"}`)),
			metav1.ConditionUnknown, updaterisk.ReasonEvaluationFailed, []string{"returned 2 samples, want exactly one"}},
		{"NoSample", one("None", promql(`nodeward_risk{case="none"}`)),
			metav1.ConditionUnknown, updaterisk.ReasonEvaluationFailed, []string{"returned 0 samples"}},
		{"ValueTwo", one("Valued2", promql(`nodeward_risk{case="two-valued"}`)),
			metav1.ConditionUnknown, updaterisk.ReasonEvaluationFailed, []string{`case="two-valued"`, "= 2, want 0 or 1"}},
		{"Scalar", one("Scalar", promql(`scalar(nodeward_risk{case="exposed"})`)),
			metav1.ConditionUnknown, updaterisk.ReasonEvaluationFailed, []string{"returned a scalar, want an instant vector"}},
		{"Always", one("Always", updategraph.MatchingRule{Type: updaterisk.TypeAlways}),
			metav1.ConditionFalse, "Always", []string{"Always is a known bug."}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			ev, _ := newEvaluator(p.URL, updaterisk.DefaultThrottle())
			e := evaluate(t, ev, tc.candidate)
			expect(t, e.Candidates[0], tc.status, tc.reason, tc.contains...)
			if retry := tc.status == metav1.ConditionUnknown; retry != (e.RetryAfter == time.Second) {
				t.Errorf("RetryAfter %s with Recommended=%s, want 1s exactly when Unknown", e.RetryAfter, tc.status)
			}
			want := int64(1)
			if tc.name == "Always" {
				want = 0
			}
			if n := queries(t, ev); n != want {
				t.Errorf("%d queries, want %d", n, want)
			}
		})
	}
}

// rulesInOrder: the first rule that evaluates decides; a rule throttled
// before it has an answer is a failure until the next pass, as in the
// CVO. Subtests of TestRisksAgainstPrometheus, sharing its Prometheus.
func rulesInOrder(t *testing.T, p *prom.Prometheus) {
	exposed, clear := promql(`nodeward_risk{case="exposed"}`), promql(`nodeward_risk{case="clear"}`)
	t.Run("FirstFailsSecondDecides", func(t *testing.T) {
		t.Parallel()
		ev, clk := newEvaluator(p.URL, updaterisk.CVOThrottle())
		c := updaterisk.Candidate{Version: "4.16.1", Risks: []updategraph.Risk{newRisk("Fallback", promql(`sum(`), exposed)}}
		// The first pass spends its one query on the bad rule; the
		// second rule waits for the throttle.
		e := evaluate(t, ev, c)
		expect(t, e.Candidates[0], metav1.ConditionUnknown, updaterisk.ReasonEvaluationFailed,
			"matchingRules[0] (PromQL)", "bad_data", "matchingRules[1] (PromQL): throttled")
		if e.RetryAfter != time.Second {
			t.Fatalf("RetryAfter %s, want 1s", e.RetryAfter)
		}
		clk.advance(e.RetryAfter + time.Millisecond)
		e = evaluate(t, ev, c)
		expect(t, e.Candidates[0], metav1.ConditionFalse, "Fallback", "Fallback is a known bug.")
		if n := queries(t, ev); n != 2 {
			t.Errorf("%d queries, want 2 (the bad rule's failure is cached)", n)
		}
	})
	t.Run("FirstDecidesSecondNotAsked", func(t *testing.T) {
		t.Parallel()
		ev, _ := newEvaluator(p.URL, updaterisk.CVOThrottle())
		c := updaterisk.Candidate{Version: "4.16.1", Risks: []updategraph.Risk{newRisk("First", clear, promql(`sum(`))}}
		expect(t, evaluate(t, ev, c).Candidates[0], metav1.ConditionTrue, updaterisk.ReasonNotExposed)
		if n := queries(t, ev); n != 1 {
			t.Errorf("%d queries, want 1", n)
		}
	})
	t.Run("ARiskIsEvaluatedOnceAsTheHighestVersionHasIt", func(t *testing.T) {
		t.Parallel()
		ev, _ := newEvaluator(p.URL, updaterisk.DefaultThrottle())
		older := updaterisk.Candidate{Version: "4.16.1", Risks: []updategraph.Risk{newRisk("Shared", clear)}}
		newer := updaterisk.Candidate{Version: "4.16.10", Risks: []updategraph.Risk{newRisk("Shared", updategraph.MatchingRule{Type: updaterisk.TypeAlways})}}
		e := evaluate(t, ev, older, newer)
		// 4.16.10's definition (Always) decides for both, as the CVO's.
		expect(t, e.Candidates[0], metav1.ConditionFalse, "Shared")
		expect(t, e.Candidates[1], metav1.ConditionFalse, "Shared")
		if a := e.Applies["Shared"]; a.Status != metav1.ConditionTrue || a.Reason != updaterisk.ReasonMatch {
			t.Errorf("Applies %+v, want True Match", a)
		}
		if n := queries(t, ev); n != 0 {
			t.Errorf("%d queries, want none", n)
		}
	})
	t.Run("InvalidRulesArePrunedAndARiskWithoutOneDropsItsCandidate", func(t *testing.T) {
		t.Parallel()
		ev, _ := newEvaluator(p.URL, updaterisk.DefaultThrottle())
		pruned := updaterisk.Candidate{Version: "4.16.2", Risks: []updategraph.Risk{newRisk("Pruned", updategraph.MatchingRule{Type: "Sometimes"}, clear)}}
		dropped := updaterisk.Candidate{Version: "4.16.3", Risks: []updategraph.Risk{newRisk("Empty", updategraph.MatchingRule{Type: updaterisk.TypePromQL})}}
		e := evaluate(t, ev, pruned, dropped)
		expect(t, e.Candidates[0], metav1.ConditionTrue, updaterisk.ReasonNotExposed)
		if r := e.Candidates[0]; r.Dropped || r.Invalid == nil || !strings.Contains(r.Invalid.Error(), `risk "Pruned" matchingRules[0]: unknown type "Sometimes"`) {
			t.Errorf("pruned candidate: dropped %t, invalid %v", r.Dropped, r.Invalid)
		}
		expect(t, e.Candidates[1], metav1.ConditionFalse, updaterisk.ReasonInvalidRisk, `risk "Empty" matchingRules[0]: promql.promql: required`)
		if !e.Candidates[1].Dropped {
			t.Error("a candidate whose risk has no valid rule is not dropped")
		}
		if _, evaluated := e.Applies["Empty"]; evaluated {
			t.Error("the dropped candidate's risk was evaluated")
		}
	})
}

// TestUnreachablePrometheusFailsEvaluation needs no Prometheus: nothing
// listens where it should be.
func TestUnreachablePrometheusFailsEvaluation(t *testing.T) {
	t.Parallel()
	ports, err := cluster.FreePorts(1)
	if err != nil {
		t.Fatal(err)
	}
	ev, _ := newEvaluator(fmt.Sprintf("http://127.0.0.1:%d", ports[0]), updaterisk.DefaultThrottle())
	c := updaterisk.Candidate{Version: "4.16.1", Risks: []updategraph.Risk{newRisk("Unreachable", promql("vector(1)"))}}
	expect(t, evaluate(t, ev, c).Candidates[0], metav1.ConditionUnknown, updaterisk.ReasonEvaluationFailed, "connection refused")
}

// TestCanceledEvaluationIsAnError: a pass cut short by its caller answers
// nothing rather than EvaluationFailed for every rule.
func TestCanceledEvaluationIsAnError(t *testing.T) {
	t.Parallel()
	ports, err := cluster.FreePorts(1)
	if err != nil {
		t.Fatal(err)
	}
	ev, _ := newEvaluator(fmt.Sprintf("http://127.0.0.1:%d", ports[0]), updaterisk.DefaultThrottle())
	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	c := updaterisk.Candidate{Version: "4.16.1", Risks: []updategraph.Risk{newRisk("R", promql("vector(1)"))}}
	if e, err := ev.Evaluate(ctx, []updaterisk.Candidate{c}, nil); !errors.Is(err, context.Canceled) {
		t.Fatalf("Evaluate with a canceled context = %+v, %v; want context.Canceled", e, err)
	}
}
