package coordinator

import (
	"context"
	"log/slog"
	"sync"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/nodeward/nodeward/api/v1alpha1"
	"github.com/nodeward/nodeward/gate"
	"github.com/nodeward/nodeward/updaterisk"
)

// riskQueryTimeout bounds one risk rule's query. The evaluation runs in
// the plan pass, which every pool waits for, and the throttle lets a pass
// make one query at most: a Prometheus slower than this fails the rule
// (EvaluationFailed), to be asked again after the throttle's interval.
const riskQueryTimeout = 5 * time.Second

// PrometheusRisks is the coordinator's RiskEvaluator: a pool's conditional
// updates are evaluated by package updaterisk against the pool's
// spec.updateSource.prometheus, else its spec.gates.prometheus, one
// Evaluator per Prometheus so that pools sharing one share its cache and
// its throttle, as the cluster version operator shares one. A pool with
// neither has its conditional updates Unknown: nothing evaluates their
// risks.
type PrometheusRisks struct {
	client *gate.Evaluator
	now    func() time.Time
	log    *slog.Logger

	mu         sync.Mutex
	evaluators map[string]*updaterisk.Evaluator
}

// NewPrometheusRisks queries through the gates' client; now is the
// throttle's clock.
func NewPrometheusRisks(client *gate.Evaluator, now func() time.Time, log *slog.Logger) *PrometheusRisks {
	return &PrometheusRisks{client: client, now: now, log: log, evaluators: map[string]*updaterisk.Evaluator{}}
}

// Recommend returns each candidate's Recommended condition, in order.
func (r *PrometheusRisks) Recommend(ctx context.Context, pool *v1alpha1.UpdatePool, candidates []updaterisk.Candidate) []metav1.Condition {
	prometheus, accepted := riskPrometheus(pool)
	if prometheus == "" {
		return unevaluated(len(candidates), "pool "+pool.Name+" has neither updateSource.prometheus nor gates.prometheus: the risks of this update cannot be evaluated")
	}
	got, err := r.evaluator(prometheus).Evaluate(ctx, candidates, accepted)
	if err != nil {
		return unevaluated(len(candidates), err.Error())
	}
	out := make([]metav1.Condition, len(candidates))
	for i, res := range got.Candidates {
		out[i] = res.Recommended
	}
	return out
}

// riskPrometheus is the Prometheus a pool's risks are asked of, and the
// risks it accepted.
func riskPrometheus(pool *v1alpha1.UpdatePool) (prometheus string, accepted []string) {
	if us := pool.Spec.UpdateSource; us != nil {
		prometheus, accepted = us.Prometheus, us.AcceptedRisks
	}
	if prometheus == "" && pool.Spec.Gates != nil {
		prometheus = pool.Spec.Gates.Prometheus
	}
	return prometheus, accepted
}

// evaluator is prometheus's Evaluator, made at first use.
func (r *PrometheusRisks) evaluator(prometheus string) *updaterisk.Evaluator {
	r.mu.Lock()
	defer r.mu.Unlock()
	ev, ok := r.evaluators[prometheus]
	if !ok {
		ev = updaterisk.New(updaterisk.Options{Prometheus: prometheus, Client: r.client, Now: r.now,
			QueryTimeout: riskQueryTimeout, Log: r.log})
		r.evaluators[prometheus] = ev
	}
	return ev
}

// unevaluated is n Recommended conditions Unknown for why: an update whose
// risks nobody evaluated is not recommended (fail closed).
func unevaluated(n int, why string) []metav1.Condition {
	out := make([]metav1.Condition, n)
	for i := range out {
		out[i] = metav1.Condition{Status: metav1.ConditionUnknown, Reason: reasonEvaluationFail, Message: why}
	}
	return out
}
