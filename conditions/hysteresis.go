package conditions

import (
	"time"

	corev1 "k8s.io/api/core/v1"
)

// Condition is the damped state of one node condition.
type Condition struct {
	Type    corev1.NodeConditionType
	Status  corev1.ConditionStatus
	Reason  string
	Message string
	// LastTransition is when Status last changed.
	LastTransition time.Time
	// DetectedAt is when the sample that caused the last transition was
	// taken, for the detection → API-write latency.
	DetectedAt time.Time
}

// Hysteresis turns samples into a condition the way the kubelet's eviction
// manager does: True after BadSamples consecutive unhealthy samples, False
// again only after QuietPeriod without one. An unreadable source makes the
// condition Unknown, except that a True condition stays True until the
// quiet period has passed, since an unreadable source proves no recovery.
type Hysteresis struct {
	badSamples  int
	quietPeriod time.Duration

	cond      Condition
	consecBad int
	lastBad   time.Time
}

// NewHysteresis starts in Unknown: nothing has been measured yet.
func NewHysteresis(t corev1.NodeConditionType, cfg HysteresisConfig) *Hysteresis {
	return &Hysteresis{
		badSamples:  max(cfg.BadSamples, 1),
		quietPeriod: cfg.QuietPeriod.Duration,
		cond:        Condition{Type: t, Status: corev1.ConditionUnknown, Reason: "NotYetMeasured"},
	}
}

// Condition returns the current state.
func (h *Hysteresis) Condition() Condition { return h.cond }

// Observe feeds one sample and reports whether the status changed. Reason
// and message follow the latest sample only when the status changes or the
// sample agrees with the status, so a True condition keeps saying why.
func (h *Hysteresis) Observe(s Signal) (changed bool) {
	switch s.Verdict {
	case Unhealthy:
		h.consecBad++
		h.lastBad = s.At
		if h.consecBad >= h.badSamples {
			return h.set(corev1.ConditionTrue, s)
		}
		if h.cond.Status == corev1.ConditionUnknown {
			// Not enough bad samples to say True, but the source is
			// readable and the condition is not known to hold.
			return h.set(corev1.ConditionFalse, Signal{Reason: "BelowBadSampleCount", Message: s.Message, At: s.At})
		}
		return false
	case Healthy:
		h.consecBad = 0
		if h.cond.Status == corev1.ConditionTrue && s.At.Sub(h.lastBad) < h.quietPeriod {
			return false
		}
		return h.set(corev1.ConditionFalse, s)
	default:
		h.consecBad = 0
		if h.cond.Status == corev1.ConditionTrue && s.At.Sub(h.lastBad) < h.quietPeriod {
			return false
		}
		return h.set(corev1.ConditionUnknown, s)
	}
}

// QuietUntil is when a True condition may clear at the earliest, so that a
// runner can sample again then; zero when nothing is pending.
func (h *Hysteresis) QuietUntil() time.Time {
	if h.cond.Status != corev1.ConditionTrue {
		return time.Time{}
	}
	return h.lastBad.Add(h.quietPeriod)
}

func (h *Hysteresis) set(status corev1.ConditionStatus, s Signal) bool {
	changed := h.cond.Status != status
	h.cond.Reason, h.cond.Message = s.Reason, s.Message
	if changed {
		h.cond.Status = status
		h.cond.LastTransition = s.At
		h.cond.DetectedAt = s.At
	}
	return changed
}
