package updaterisk

import (
	"context"
	"fmt"
	"sort"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	utilerrors "k8s.io/apimachinery/pkg/util/errors"

	"github.com/nodeward/nodeward/updategraph"
)

// Evaluate says of each candidate whether it is recommended: its risks'
// rules checked, each risk named by the kept candidates evaluated once,
// and each candidate's Recommended condition built from them. accepted
// names the risks the operator accepted. The error is ctx's only, when it
// ends before this pass does (its rules then failed for no reason of
// theirs, and no answer of theirs is kept); a failure to evaluate is an
// answer (EvaluationFailed), not an error.
func (ev *Evaluator) Evaluate(ctx context.Context, candidates []Candidate, accepted []string) (Evaluation, error) {
	if err := ev.acquire(ctx); err != nil {
		return Evaluation{}, err
	}
	defer ev.release()

	results := make([]Result, len(candidates))
	rules := make([][][]rule, len(candidates)) // candidate → risk → valid rules
	for i, c := range candidates {
		results[i], rules[i] = checkCandidate(c)
	}
	applies := map[string]metav1.Condition{}
	for _, r := range risksInOrder(candidates, results, rules) {
		exposed, err := ev.exposed(ctx, r.rules)
		applies[r.risk.Name] = appliesCondition(r.risk, exposed, err)
	}
	acceptedSet := make(map[string]bool, len(accepted))
	for _, name := range accepted {
		acceptedSet[name] = true
	}
	out := Evaluation{Candidates: results, Applies: applies}
	for i, c := range candidates {
		if results[i].Dropped {
			continue
		}
		results[i].Recommended = recommended(c.Risks, applies, acceptedSet)
		if results[i].Recommended.Status == metav1.ConditionUnknown {
			out.RetryAfter = ev.cache.throttle.MinBetweenQueries
		}
	}
	if err := context.Cause(ctx); err != nil {
		// Rules cut short by the caller failed for no reason of theirs.
		return Evaluation{}, fmt.Errorf("evaluate update risks: %w", err)
	}
	return out, nil
}

// checkCandidate prunes the rules of each of c's risks; a risk left
// without a valid rule drops the candidate.
func checkCandidate(c Candidate) (Result, [][]rule) {
	res := Result{Version: c.Version}
	valid := make([][]rule, len(c.Risks))
	var errs []error
	for j, risk := range c.Risks {
		var err error
		valid[j], err = prune(risk)
		if err != nil {
			errs = append(errs, err)
		}
		if len(valid[j]) == 0 || risk.Name == "" {
			res.Dropped = true
		}
	}
	res.Invalid = utilerrors.NewAggregate(errs)
	if res.Dropped {
		res.Recommended = metav1.Condition{Type: ConditionRecommended, Status: metav1.ConditionFalse,
			Reason: ReasonInvalidRisk, Message: "The update is not offered: " + res.Invalid.Error()}
	}
	return res, valid
}

// pending is a risk to evaluate: its definition and valid rules as the
// highest version naming it has them.
type pending struct {
	version string
	risk    updategraph.Risk
	rules   []rule
}

// risksInOrder returns each risk named by a kept candidate once, in the
// CVO's order: the highest version first, by name among equals. The order
// decides which rule gets a pass's one query when none is waiting.
func risksInOrder(candidates []Candidate, results []Result, rules [][][]rule) []pending {
	byName := map[string]pending{}
	for i, c := range candidates {
		if results[i].Dropped {
			continue
		}
		v := c.Version
		for j, risk := range c.Risks {
			if p, seen := byName[risk.Name]; !seen || updategraph.CompareVersions(v, p.version) > 0 {
				byName[risk.Name] = pending{version: v, risk: risk, rules: rules[i][j]}
			}
		}
	}
	out := make([]pending, 0, len(byName))
	for _, p := range byName {
		out = append(out, p)
	}
	sort.Slice(out, func(a, b int) bool {
		if d := updategraph.CompareVersions(out[a].version, out[b].version); d != 0 {
			return d > 0
		}
		return out[a].risk.Name < out[b].risk.Name
	})
	return out
}
