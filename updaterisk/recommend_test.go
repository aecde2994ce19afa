package updaterisk

import (
	"strings"
	"testing"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/nodeward/nodeward/updategraph"
)

func risk(name string) updategraph.Risk {
	return updategraph.Risk{Name: name, Message: name + " breaks things.", URL: "https://bugs.example/" + name,
		MatchingRules: []updategraph.MatchingRule{{Type: TypeAlways}}}
}

var (
	applies    = metav1.Condition{Type: ConditionApplies, Status: metav1.ConditionTrue, Reason: ReasonMatch}
	notApplies = metav1.Condition{Type: ConditionApplies, Status: metav1.ConditionFalse, Reason: ReasonNotMatch}
	unknown    = metav1.Condition{Type: ConditionApplies, Status: metav1.ConditionUnknown, Reason: ReasonEvaluationFailed, Message: "could not tell"}
)

// TestRecommended checks the Recommended condition as the CVO builds it
// from its risks' Applies conditions.
func TestRecommended(t *testing.T) {
	for _, tc := range []struct {
		name     string
		risks    []string
		applies  map[string]metav1.Condition
		accepted []string
		status   metav1.ConditionStatus
		reason   string
		message  string // exact when it has no "…"
	}{
		{"NoRisk", nil, nil, nil, metav1.ConditionTrue, ReasonNotExposed, "The update is recommended: none of its risks applies to this cluster."},
		{"NoneApplies", []string{"A", "B"}, map[string]metav1.Condition{"A": notApplies, "B": notApplies}, nil,
			metav1.ConditionTrue, ReasonNotExposed, "The update is recommended: none of its risks applies to this cluster."},
		{"OneAppliesItsNameIsTheReason", []string{"A", "B"}, map[string]metav1.Condition{"A": notApplies, "B": applies}, nil,
			metav1.ConditionFalse, "B", "B breaks things. https://bugs.example/B"},
		{"NameNotAReason", []string{"bad name"}, map[string]metav1.Condition{"bad name": applies}, nil,
			metav1.ConditionFalse, ReasonExposed, "bad name breaks things. https://bugs.example/bad name"},
		{"TwoApply", []string{"A", "B"}, map[string]metav1.Condition{"A": applies, "B": applies}, nil,
			metav1.ConditionFalse, ReasonMultiple, "A breaks things. https://bugs.example/A\n\nB breaks things. https://bugs.example/B"},
		{"SameRiskTwice", []string{"A", "A"}, map[string]metav1.Condition{"A": applies}, nil,
			metav1.ConditionFalse, "A", "A breaks things. https://bugs.example/A\n\nA breaks things. https://bugs.example/A"},
		{"Unknown", []string{"A", "B"}, map[string]metav1.Condition{"A": unknown, "B": notApplies}, nil,
			metav1.ConditionUnknown, ReasonEvaluationFailed, "could not tell"},
		{"UnknownThenNamedExposure", []string{"A", "B"}, map[string]metav1.Condition{"A": unknown, "B": applies}, nil,
			metav1.ConditionFalse, ReasonMultiple, "could not tell\n\nB breaks things. https://bugs.example/B"},
		{"UnknownThenUnnamedExposure", []string{"A", "b b"}, map[string]metav1.Condition{"A": unknown, "b b": applies}, nil,
			metav1.ConditionFalse, ReasonExposed, "could not tell\n\nb b breaks things. https://bugs.example/b b"},
		{"NamedExposureThenUnknown", []string{"B", "A"}, map[string]metav1.Condition{"A": unknown, "B": applies}, nil,
			metav1.ConditionFalse, ReasonMultiple, "B breaks things. https://bugs.example/B\n\ncould not tell"},
		{"Accepted", []string{"A", "B"}, map[string]metav1.Condition{"A": applies, "B": notApplies}, []string{"A"},
			metav1.ConditionTrue, ReasonAccepted, "The update is recommended: each of its risks that applies to this cluster is accepted."},
		{"AcceptedAndExposed", []string{"A", "B"}, map[string]metav1.Condition{"A": applies, "B": applies}, []string{"A"},
			metav1.ConditionFalse, "B", "B breaks things. https://bugs.example/B"},
		{"ExposedThenAccepted", []string{"B", "A"}, map[string]metav1.Condition{"A": applies, "B": applies}, []string{"A"},
			metav1.ConditionFalse, ReasonMultiple, "B breaks things. https://bugs.example/B"},
		{"AcceptedAndUnknown", []string{"A", "B"}, map[string]metav1.Condition{"A": applies, "B": unknown}, []string{"A"},
			metav1.ConditionUnknown, ReasonEvaluationFailed, "could not tell"},
		{"NotEvaluated", []string{"A"}, nil, nil, metav1.ConditionUnknown, ReasonEvaluationFailed, "no evaluation of risk A"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			var risks []updategraph.Risk
			for _, n := range tc.risks {
				risks = append(risks, risk(n))
			}
			accepted := map[string]bool{}
			for _, n := range tc.accepted {
				accepted[n] = true
			}
			c := recommended(risks, tc.applies, accepted)
			if c.Type != ConditionRecommended || c.Status != tc.status || c.Reason != tc.reason || c.Message != tc.message {
				t.Errorf("got %s=%s %s %q\nwant %s=%s %s %q", c.Type, c.Status, c.Reason, c.Message, ConditionRecommended, tc.status, tc.reason, tc.message)
			}
		})
	}
}

func TestAppliesConditionNamesTheRiskOnFailure(t *testing.T) {
	c := appliesCondition(risk("A"), false, errThrottled)
	for _, s := range []string{"update risk A", "throttled", "A description: A breaks things.", "A URL: https://bugs.example/A"} {
		if !strings.Contains(c.Message, s) {
			t.Errorf("message %q does not contain %q", c.Message, s)
		}
	}
	if c.Status != metav1.ConditionUnknown || c.Reason != ReasonEvaluationFailed {
		t.Errorf("got %s %s, want Unknown EvaluationFailed", c.Status, c.Reason)
	}
}

func TestValidateNamesTheRiskAndTheRule(t *testing.T) {
	r := updategraph.Risk{Name: "R", MatchingRules: []updategraph.MatchingRule{
		{Type: TypePromQL, PromQL: &updategraph.PromQLQuery{PromQL: "vector(1)"}},
		{Type: "Sometimes"},
		{Type: TypePromQL},
		{Type: TypePromQL, PromQL: &updategraph.PromQLQuery{PromQL: ""}},
		{Type: TypeAlways, PromQL: &updategraph.PromQLQuery{PromQL: "vector(1)"}},
		{Type: TypeAlways},
	}}
	err := Validate(r)
	if err == nil {
		t.Fatal("Validate accepted invalid rules")
	}
	for _, s := range []string{
		`risk "R" matchingRules[1]: unknown type "Sometimes", want Always or PromQL`,
		`risk "R" matchingRules[2]: promql.promql: required for type PromQL`,
		`risk "R" matchingRules[3]: promql.promql: required`,
		`risk "R" matchingRules[4]: a promql query is not valid for type Always`,
	} {
		if !strings.Contains(err.Error(), s) {
			t.Errorf("error %q does not contain %q", err, s)
		}
	}
	if strings.Contains(err.Error(), "matchingRules[0]") || strings.Contains(err.Error(), "matchingRules[5]") {
		t.Errorf("error %q names a valid rule", err)
	}
	valid, _ := prune(r)
	if len(valid) != 2 || valid[0].index != 0 || valid[1].index != 5 {
		t.Errorf("valid rules %+v, want rules 0 and 5", valid)
	}
	if err := Validate(updategraph.Risk{Name: "E", MatchingRules: []updategraph.MatchingRule{{Type: "x"}}}); err == nil ||
		!strings.Contains(err.Error(), `risk "E": no valid matching rule`) {
		t.Errorf("a risk without a valid rule: %v", err)
	}
	if err := Validate(updategraph.Risk{Message: "m", MatchingRules: []updategraph.MatchingRule{{Type: TypeAlways}}}); err == nil ||
		!strings.Contains(err.Error(), "name: required") {
		t.Errorf("a risk without a name: %v", err)
	}
	if err := Validate(risk("OK")); err != nil {
		t.Errorf("a valid risk: %v", err)
	}
}
