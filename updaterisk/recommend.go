package updaterisk

import (
	"fmt"
	"regexp"
	"strings"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/nodeward/nodeward/updategraph"
)

// The conditions and reasons, as the CVO writes them in ClusterVersion's
// status.
const (
	// ConditionRecommended is a candidate's condition: True, the update
	// is recommended; False, a risk applies; Unknown, an exposure could
	// not be evaluated.
	ConditionRecommended = "Recommended"
	// ReasonNotExposed: none of the candidate's risks applies.
	ReasonNotExposed = "NotExposedToRisks"
	// ReasonAccepted: each risk that applies was accepted.
	ReasonAccepted = "AllExposedRisksAccepted"
	// ReasonEvaluationFailed: a risk's exposure is unknown.
	ReasonEvaluationFailed = "EvaluationFailed"
	// ReasonMultiple: the candidate's risks give different reasons.
	ReasonMultiple = "MultipleReasons"
	// ReasonExposed: a risk applies whose name is no valid condition
	// reason (a risk named validly is the reason itself).
	ReasonExposed = "ExposedToRisks"
	// ReasonInvalidRisk is nodeward's own: a risk of the candidate has no
	// valid rule, so the CVO would drop the candidate from its status;
	// nodeward keeps it, not recommended, so that the pool says why.
	ReasonInvalidRisk = "InvalidRisk"

	// ConditionApplies is a risk's condition: whether it applies to this
	// cluster.
	ConditionApplies = "Applies"
	// ReasonMatch, ReasonNotMatch: a rule evaluated, exposed or not.
	ReasonMatch    = "Match"
	ReasonNotMatch = "NotMatch"
)

// reasonPattern is the pattern of a Kubernetes condition's reason; a risk
// whose name fits it is its own reason.
var reasonPattern = regexp.MustCompile(`^[A-Za-z]([A-Za-z0-9_,:]*[A-Za-z0-9_])?$`)

// appliesCondition says whether a risk applies, from its evaluation.
func appliesCondition(risk updategraph.Risk, exposed bool, err error) metav1.Condition {
	switch {
	case err != nil:
		return metav1.Condition{Type: ConditionApplies, Status: metav1.ConditionUnknown, Reason: ReasonEvaluationFailed,
			Message: fmt.Sprintf("Exposure to update risk %s is unknown: %v\n  %s description: %s\n  %s URL: %s",
				risk.Name, err, risk.Name, risk.Message, risk.Name, risk.URL)}
	case exposed:
		return metav1.Condition{Type: ConditionApplies, Status: metav1.ConditionTrue, Reason: ReasonMatch}
	default:
		return metav1.Condition{Type: ConditionApplies, Status: metav1.ConditionFalse, Reason: ReasonNotMatch}
	}
}

// recommended builds a candidate's Recommended condition from the Applies
// condition of each of its risks, in the candidate's order.
func recommended(risks []updategraph.Risk, applies map[string]metav1.Condition, accepted map[string]bool) metav1.Condition {
	c := metav1.Condition{Type: ConditionRecommended, Status: metav1.ConditionTrue, Reason: ReasonNotExposed,
		Message: "The update is recommended: none of its risks applies to this cluster."}
	var messages []string
	for _, risk := range risks {
		a, found := applies[risk.Name]
		if !found { // every risk of a candidate kept is evaluated
			a = metav1.Condition{Status: metav1.ConditionUnknown, Message: fmt.Sprintf("no evaluation of risk %s", risk.Name)}
		}
		switch {
		case a.Status == metav1.ConditionUnknown:
			c.Status = mergeStatus(c.Status, metav1.ConditionUnknown)
			c.Reason = mergeReason(c.Reason, ReasonEvaluationFailed)
			messages = append(messages, a.Message)
		case a.Status == metav1.ConditionTrue && accepted[risk.Name]:
			c.Status = mergeStatus(c.Status, metav1.ConditionTrue)
			c.Reason = mergeReason(c.Reason, ReasonAccepted)
			c.Message = "The update is recommended: each of its risks that applies to this cluster is accepted."
		case a.Status == metav1.ConditionTrue:
			c.Status = mergeStatus(c.Status, metav1.ConditionFalse)
			c.Reason = mergeReason(c.Reason, exposedReason(risk.Name))
			messages = append(messages, risk.Message+" "+risk.URL)
		}
	}
	if len(messages) > 0 {
		c.Message = strings.Join(messages, "\n\n")
	}
	return c
}

func exposedReason(name string) string {
	if reasonPattern.MatchString(name) {
		return name
	}
	return ReasonExposed
}

// mergeStatus: one risk applying makes the update not recommended; else
// one unknown exposure makes it unknown.
func mergeStatus(now, next metav1.ConditionStatus) metav1.ConditionStatus {
	for _, s := range []metav1.ConditionStatus{metav1.ConditionFalse, metav1.ConditionUnknown} {
		if now == s || next == s {
			return s
		}
	}
	return next
}

// mergeReason combines the reason so far with the next risk's, as the CVO
// does: the first risk's reason replaces NotExposedToRisks, a reason
// repeated stands, an acceptance gives way to anything after it, and
// ExposedToRisks absorbs what follows it of acceptances and failures, as
// a failure absorbs acceptances and gives way to ExposedToRisks (but not
// to a risk's own name). Any other mix is MultipleReasons.
func mergeReason(now, next string) string {
	switch {
	case now == next, now == ReasonNotExposed:
		return next
	case next == ReasonNotExposed:
		return now
	case now == ReasonAccepted:
		return next
	case now == ReasonEvaluationFailed && next == ReasonExposed:
		return next
	case now == ReasonEvaluationFailed && next == ReasonAccepted,
		now == ReasonExposed && (next == ReasonAccepted || next == ReasonEvaluationFailed):
		return now
	default:
		return ReasonMultiple
	}
}
