package update

import (
	"testing"

	v1alpha1 "github.com/nodeward/nodeward/api/v1alpha1"
	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/testutil"
)

// TestUpdateMetrics runs one cycle and reads the metrics back from the
// registry: the current step, one unavailable window, one pre-staged grant.
func TestUpdateMetrics(t *testing.T) {
	t.Parallel()
	reg := prometheus.NewRegistry()
	metrics, err := NewMetrics(reg)
	if err != nil {
		t.Fatal(err)
	}
	w := newWorld(t, "os-1")
	w.desired = Desired{Target: "os-2"}
	dir := t.TempDir()
	m := w.machine(dir)
	m.cfg.Metrics = metrics
	settle(t, m)
	w.set(func(w *world) { w.desired.Grant = "g" })
	settle(t, m)
	w.boot(false)
	w.advance(42e9) // the node was down 42 s
	m = w.machine(dir)
	m.cfg.Metrics = metrics
	if got := settle(t, m); got != v1alpha1.StepDone {
		t.Fatalf("step %s, want Done", got)
	}
	families, err := reg.Gather()
	if err != nil {
		t.Fatal(err)
	}
	values := map[string]float64{}
	for _, f := range families {
		for _, metric := range f.Metric {
			name := f.GetName()
			for _, l := range metric.Label {
				name += "{" + l.GetValue() + "}"
			}
			switch {
			case metric.Gauge != nil:
				values[name] = metric.Gauge.GetValue()
			case metric.Counter != nil:
				values[name] = metric.Counter.GetValue()
			case metric.Histogram != nil:
				values[name+"_count"] = float64(metric.Histogram.GetSampleCount())
				values[name+"_sum"] = metric.Histogram.GetSampleSum()
			}
		}
	}
	want := map[string]float64{
		"nodeward_update_step{Done}":                            1,
		"nodeward_update_step{Draining}":                        0,
		"nodeward_update_grants_received_total":                 1,
		"nodeward_update_staged_before_slot_total":              1,
		"nodeward_update_unavailable_seconds_count":             1,
		"nodeward_update_unavailable_seconds_sum":               42,
		"nodeward_update_step_duration_seconds{Draining}_count": 1,
	}
	for k, v := range want {
		if values[k] != v {
			t.Errorf("%s = %v, want %v", k, values[k], v)
		}
	}
}

// TestRollbackCounted: a failed verification and the rollback boot count
// one rollback, although the machine leaves RolledBack for Degraded at
// once (the alert NodewardNodeRolledBack reads the counter, not the step).
func TestRollbackCounted(t *testing.T) {
	t.Parallel()
	metrics, err := NewMetrics(prometheus.NewRegistry())
	if err != nil {
		t.Fatal(err)
	}
	w, dir := rebooting(t)
	w.boot(true) // the new deployment did not come up
	m := w.machine(dir)
	m.cfg.Metrics = metrics
	settle(t, m)
	if got := testutil.ToFloat64(metrics.rollbacks); got != 0 {
		t.Fatalf("before the rollback boot: rollbacks %v, want 0", got)
	}
	w.boot(false)
	m = w.machine(dir)
	m.cfg.Metrics = metrics
	if got := settle(t, m); got != v1alpha1.StepDegraded {
		t.Fatalf("after the rollback boot: step %s, want Degraded", got)
	}
	settle(t, m)
	if got := testutil.ToFloat64(metrics.rollbacks); got != 1 {
		t.Fatalf("rollbacks %v, want 1", got)
	}
	if got := testutil.ToFloat64(metrics.step.WithLabelValues(string(v1alpha1.StepRolledBack))); got != 0 {
		t.Fatalf("step RolledBack gauge %v: the step is left at once", got)
	}
}
