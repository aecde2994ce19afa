package updaterisk

import (
	"context"
	"fmt"
	"strconv"

	"github.com/prometheus/common/model"
	utilerrors "k8s.io/apimachinery/pkg/util/errors"

	"github.com/nodeward/nodeward/updategraph"
)

// rule is a valid matching rule with its index among the risk's rules, so
// that a failure names the rule as the graph wrote it.
type rule struct {
	index int
	updategraph.MatchingRule
}

// exposed evaluates a risk's valid rules in order: the first that
// evaluates decides; when none does, the error lists why each failed.
func (ev *Evaluator) exposed(ctx context.Context, rules []rule) (bool, error) {
	var errs []error
	for _, r := range rules {
		exposed, err := ev.match(ctx, r.MatchingRule)
		if err == nil {
			return exposed, nil
		}
		errs = append(errs, fmt.Errorf("matchingRules[%d] (%s): %w", r.index, r.Type, err))
	}
	return false, utilerrors.NewAggregate(errs)
}

// match evaluates one valid rule: Always without asking anything, PromQL
// through the cache.
func (ev *Evaluator) match(ctx context.Context, r updategraph.MatchingRule) (bool, error) {
	if r.Type == TypeAlways {
		return true, nil
	}
	return ev.cache.match(ctx, r.PromQL.PromQL)
}

// queryRule asks Prometheus for one PromQL rule's answer.
func (ev *Evaluator) queryRule(ctx context.Context, promql string) answer {
	value, err := ev.client.Instant(ctx, ev.prometheus, promql, ev.queryTimeout)
	if err != nil {
		return answer{err: err}
	}
	exposed, err := judge(value)
	if err != nil {
		err = fmt.Errorf("query %q at Prometheus %s %w", promql, ev.redactedURL, err)
	}
	return answer{exposed: exposed, err: err}
}

// judge reads a PromQL rule's result as the CVO does: an instant vector
// of exactly one sample, 1 exposed, 0 not; anything else says nothing.
func judge(value model.Value) (bool, error) {
	vector, ok := value.(model.Vector)
	if !ok {
		kind := "no result"
		if value != nil {
			kind = "a " + value.Type().String()
		}
		return false, fmt.Errorf("returned %s, want an instant vector of one sample", kind)
	}
	if len(vector) != 1 {
		return false, fmt.Errorf("returned %d samples, want exactly one", len(vector))
	}
	switch s := vector[0]; s.Value {
	case 1:
		return true, nil
	case 0:
		return false, nil
	default:
		return false, fmt.Errorf("returned %s = %s, want 0 or 1", s.Metric, strconv.FormatFloat(float64(s.Value), 'g', -1, 64))
	}
}
