package coordinator

import (
	"fmt"
	"math"
	"slices"
	"strings"

	"k8s.io/apimachinery/pkg/util/intstr"

	"github.com/nodeward/nodeward/api/v1alpha1"
)

// Why a halted pool is halted: the Halted condition's reason.
const (
	haltFailureBudget = "FailureBudgetExhausted"
	haltCanaryFailed  = "CanaryFailed"
	haltGateFailed    = "GateFailedWhileSoaking"
)

// halt is why a pool grants nothing until an operator resumes it or the
// target changes; the zero halt is none.
type halt struct {
	reason, message string
}

// haltOf decides whether the pool is halted, first by what was persisted
// (a gate that failed while a node soaked), then by what the nodes show:
// a canary that failed, an exhausted failure budget. failed lists the
// pool's nodes that failed on the current target; failures an operator
// acknowledged when resuming (v1alpha1.AnnotationFailuresAcknowledged,
// for this target only) do not count.
func haltOf(pool *v1alpha1.UpdatePool, failed []string, machines int, canaryActive bool) (halt, error) {
	if config, msg, ok := strings.Cut(pool.Annotations[v1alpha1.AnnotationHalted], ":"); ok && config == ConfigName(pool.Spec) {
		return halt{haltGateFailed, msg + "; nodeward resume " + pool.Name + " goes on"}, nil
	}
	acked := acknowledgedFailures(pool)
	var counted []string
	for _, n := range failed {
		if !acked[n] {
			counted = append(counted, n)
		}
	}
	if len(counted) == 0 {
		return halt{}, nil
	}
	slices.Sort(counted)
	if canaryActive {
		return halt{haltCanaryFailed, fmt.Sprintf("canary %s failed on the target: no other node is touched; fix the cause, then change the target or run nodeward resume %s",
			strings.Join(counted, ", "), pool.Name)}, nil
	}
	if pool.Spec.FailureBudget == nil {
		return halt{}, nil
	}
	budget, err := countOrPercent(pool.Spec.FailureBudget, machines, "failureBudget")
	if err != nil {
		return halt{}, err
	}
	if len(counted) < budget {
		return halt{}, nil
	}
	return halt{haltFailureBudget, fmt.Sprintf("failure budget of %s exhausted: %s failed on the target; fix the cause, then change the target or run nodeward resume %s",
		pool.Spec.FailureBudget.String(), strings.Join(counted, ", "), pool.Name)}, nil
}

// countOrPercent resolves a count or a percentage of n, rounded up and at
// least 1 (failureBudget, canary.nodes); field names it in errors.
func countOrPercent(v *intstr.IntOrString, n int, field string) (int, error) {
	if v.Type == intstr.Int {
		if v.IntVal < 1 {
			return 0, fmt.Errorf("%s %d: must be at least 1", field, v.IntVal)
		}
		return int(v.IntVal), nil
	}
	p, ok := percent(v.StrVal)
	if !ok || p < 1 {
		return 0, fmt.Errorf("%s %q: want an integer or a percentage from 1%% to 100%%", field, v.StrVal)
	}
	return max(1, int(math.Ceil(float64(n)*float64(p)/100))), nil
}

// acknowledgedFailures reads the pool's acknowledgement, which holds only
// for the target it was written for.
func acknowledgedFailures(pool *v1alpha1.UpdatePool) map[string]bool {
	config, nodes, ok := strings.Cut(pool.Annotations[v1alpha1.AnnotationFailuresAcknowledged], ":")
	if !ok || config != ConfigName(pool.Spec) {
		return nil
	}
	acked := map[string]bool{}
	for _, n := range strings.Split(nodes, ",") {
		if n != "" {
			acked[n] = true
		}
	}
	return acked
}

// FailuresAcknowledgement is the annotation value with which `nodeward
// resume` acknowledges the failures the pool's status lists.
func FailuresAcknowledgement(pool *v1alpha1.UpdatePool) string {
	return pool.Status.ConfigName + ":" + strings.Join(pool.Status.FailedNodes, ",")
}

// HaltedByGate is the pool annotation that halts pool for message: a gate
// failed while a node soaked or a canary baked.
func HaltedByGate(pool *v1alpha1.UpdatePool, message string) string {
	return ConfigName(pool.Spec) + ":" + message
}
