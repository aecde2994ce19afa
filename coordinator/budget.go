package coordinator

import (
	"fmt"
	"slices"
	"strings"

	"github.com/nodeward/nodeward/api/v1alpha1"
)

// failureBudgetExhausted says why the pool's failure budget stops its
// grants: failed lists its nodes that failed on the current target, the
// budget counts those an operator did not acknowledge when resuming
// (v1alpha1.AnnotationFailuresAcknowledged, for this target only). ""
// when there is no budget or it holds.
func failureBudgetExhausted(pool *v1alpha1.UpdatePool, failed []string) string {
	budget := pool.Spec.FailureBudget
	if budget == nil || len(failed) == 0 {
		return ""
	}
	acked := acknowledgedFailures(pool)
	var counted []string
	for _, n := range failed {
		if !acked[n] {
			counted = append(counted, n)
		}
	}
	if len(counted) < int(*budget) {
		return ""
	}
	slices.Sort(counted)
	return fmt.Sprintf("failure budget of %d exhausted: %s failed on the target; fix the cause, then change the target or run nodeward resume %s",
		*budget, strings.Join(counted, ", "), pool.Name)
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
