package coordinator

import (
	"testing"

	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
)

// healthCheck is an unstructured MachineHealthCheck in namespace ns with a
// selector (nil: none) and annotations.
func healthCheck(ns string, selector map[string]any, annotations map[string]string) *unstructured.Unstructured {
	h := &unstructured.Unstructured{Object: map[string]any{"spec": map[string]any{}}}
	h.SetNamespace(ns)
	h.SetName("check")
	h.SetAnnotations(annotations)
	if selector != nil {
		_ = unstructured.SetNestedField(h.Object, selector, "spec", "selector")
	}
	return h
}

// TestHealthCheckJudges: a health check judges the Machines of its API and
// namespace its selector picks, all of them when the selector is empty (as
// the controller does), none when it cannot be parsed; only nodeward's own
// value of the pause is nodeward's.
func TestHealthCheckJudges(t *testing.T) {
	openshift := machineAPINamed("machine.openshift.io")
	worker := recordOf(openshift, machine("w", "n", "Running", map[string]string{"role": "worker"}, false))
	infra := recordOf(openshift, machine("i", "n2", "Running", map[string]string{"role": "infra"}, false))
	byRole := map[string]any{"matchLabels": map[string]any{"role": "worker"}}
	bad := map[string]any{"matchExpressions": []any{map[string]any{"key": "role", "operator": "Sideways"}}}
	for _, c := range []struct {
		name          string
		h             healthCheckRecord
		worker, infra bool
	}{
		{"by role", healthCheckOf(openshift.name, healthCheck("openshift-machine-api", byRole, nil)), true, false},
		{"empty selector", healthCheckOf(openshift.name, healthCheck("openshift-machine-api", map[string]any{}, nil)), true, true},
		{"no selector", healthCheckOf(openshift.name, healthCheck("openshift-machine-api", nil, nil)), true, true},
		{"other namespace", healthCheckOf(openshift.name, healthCheck("elsewhere", byRole, nil)), false, false},
		{"other API", healthCheckOf("cluster.x-k8s.io", healthCheck("openshift-machine-api", byRole, nil)), false, false},
		{"bad selector", healthCheckOf(openshift.name, healthCheck("openshift-machine-api", bad, nil)), false, false},
	} {
		if got := c.h.judges(worker); got != c.worker {
			t.Errorf("%s: judges the worker %v, want %v", c.name, got, c.worker)
		}
		if got := c.h.judges(infra); got != c.infra {
			t.Errorf("%s: judges the infra Machine %v, want %v", c.name, got, c.infra)
		}
	}
	for value, ours := range map[string]bool{RemediationHoldValue: true, "": false, "operator": false} {
		h := healthCheckOf(openshift.name, healthCheck("openshift-machine-api", byRole, map[string]string{PausedAnnotation: value}))
		if !h.paused || h.ours != ours {
			t.Errorf("paused %q: paused %v ours %v, want true %v", value, h.paused, h.ours, ours)
		}
	}
}
