package updaterisk

import (
	"fmt"

	utilerrors "k8s.io/apimachinery/pkg/util/errors"

	"github.com/nodeward/nodeward/updategraph"
)

// The rule types the CVO registers, and so the only ones a rule may have.
const (
	TypeAlways = "Always"
	TypePromQL = "PromQL"
)

// ruleChecks says, per rule type, what makes a rule of that type invalid;
// a type not listed is unknown.
var ruleChecks = map[string]func(updategraph.MatchingRule) error{
	TypeAlways: func(r updategraph.MatchingRule) error {
		if r.PromQL != nil {
			return fmt.Errorf("a promql query is not valid for type %s", TypeAlways)
		}
		return nil
	},
	TypePromQL: func(r updategraph.MatchingRule) error {
		// Empty only, as the CVO checks: a blank query is Prometheus's
		// to reject (a failed rule, not an invalid one).
		if r.PromQL == nil || r.PromQL.PromQL == "" {
			return fmt.Errorf("promql.promql: required for type %s", TypePromQL)
		}
		return nil
	},
}

// Validate checks a risk without asking Prometheus anything, and returns
// every problem, each naming the risk and the rule, as in
// `risk "Foo" matchingRules[1]: unknown type "Sometimes"`.
func Validate(risk updategraph.Risk) error {
	_, err := prune(risk)
	return err
}

// prune returns the valid rules of risk, in order, and what is wrong with
// the others; the CVO evaluates a risk's valid rules only. A risk without
// a name or without a valid rule is wrong as a whole.
func prune(risk updategraph.Risk) ([]rule, error) {
	var valid []rule
	var errs []error
	if risk.Name == "" {
		errs = append(errs, fmt.Errorf("a risk with the message %q: name: required", risk.Message))
	}
	for i, r := range risk.MatchingRules {
		check, known := ruleChecks[r.Type]
		if !known {
			errs = append(errs, fmt.Errorf("risk %q matchingRules[%d]: unknown type %q, want %s or %s", risk.Name, i, r.Type, TypeAlways, TypePromQL))
			continue
		}
		if err := check(r); err != nil {
			errs = append(errs, fmt.Errorf("risk %q matchingRules[%d]: %w", risk.Name, i, err))
			continue
		}
		valid = append(valid, rule{index: i, MatchingRule: r})
	}
	if len(valid) == 0 && risk.Name != "" {
		errs = append(errs, fmt.Errorf("risk %q: no valid matching rule", risk.Name))
	}
	return valid, utilerrors.NewAggregate(errs)
}
