package conditions

import (
	"context"

	corev1 "k8s.io/api/core/v1"

	"github.com/nodeward/nodeward/conditions/taints"
)

// Report is the one-shot health of a host, as `nodeward check` prints it.
type Report struct {
	Probes []ProbeReport `json:"probes"`
	// Taints are the taints the agent would apply, in kubectl's form.
	Taints []string `json:"taints"`
}

// ProbeReport is one probe's sample and the condition it implies.
type ProbeReport struct {
	Probe     string                   `json:"probe"`
	Condition corev1.NodeConditionType `json:"condition"`
	Status    corev1.ConditionStatus   `json:"status"`
	Reason    string                   `json:"reason"`
	Message   string                   `json:"message"`
}

// Check samples every probe once. A single sample stands for the condition
// (no hysteresis: a one-shot report has no history).
func Check(ctx context.Context, probes []Probe, table TaintTable) Report {
	signals := SampleOnce(ctx, probes)
	var r Report
	conds := make([]Condition, 0, len(signals))
	for i, s := range signals {
		status := corev1.ConditionFalse
		switch s.Verdict {
		case Unhealthy:
			status = corev1.ConditionTrue
		case Unknown:
			status = corev1.ConditionUnknown
		}
		r.Probes = append(r.Probes, ProbeReport{Probe: probes[i].Name(), Condition: s.Condition,
			Status: status, Reason: s.Reason, Message: s.Message})
		conds = append(conds, Condition{Type: s.Condition, Status: status})
	}
	r.Taints = []string{}
	for _, t := range table.Desired(conds) {
		r.Taints = append(r.Taints, taints.Format(t))
	}
	return r
}

// ExitCode is check's contract: 0 healthy, 1 a condition is True, 2 a probe
// could not run (and none is True: a known problem outranks an unknown).
func (r Report) ExitCode() int {
	code := 0
	for _, p := range r.Probes {
		switch p.Status {
		case corev1.ConditionTrue:
			return 1
		case corev1.ConditionUnknown:
			code = 2
		}
	}
	return code
}
