package conditions

import (
	"context"
	"time"

	corev1 "k8s.io/api/core/v1"
)

// Verdict is what one probe sample says about its condition.
type Verdict int

const (
	// Healthy: the condition does not hold (condition status False).
	Healthy Verdict = iota
	// Unhealthy: the condition holds (condition status True).
	Unhealthy
	// Unknown: the probe could not read its source; the reason says why.
	Unknown
)

func (v Verdict) String() string {
	switch v {
	case Healthy:
		return "Healthy"
	case Unhealthy:
		return "Unhealthy"
	default:
		return "Unknown"
	}
}

// Signal is one sample of a probe.
type Signal struct {
	Condition corev1.NodeConditionType
	Verdict   Verdict
	// Reason is a CamelCase word for the condition's reason field.
	Reason string
	// Message says what was measured, for people.
	Message string
	// At is when the sample was taken.
	At time.Time
}

// Probe samples one source of host health. Sample never blocks longer than
// ctx allows and never fails: a source it cannot read yields Unknown.
type Probe interface {
	// Name is a short identifier, used in metrics and logs.
	Name() string
	// Condition is the node condition type the probe decides.
	Condition() corev1.NodeConditionType
	// Sample reads the source once.
	Sample(ctx context.Context) Signal
	// Interval is how often the probe is sampled without an event; for
	// event-driven probes it is the backstop relist.
	Interval() time.Duration
}

// EventSource is implemented by probes whose source can announce changes
// (PSI triggers, netlink). Watch sends on wake whenever the source may have
// changed, without blocking (the channel has room for one pending wake-up),
// until ctx ends. It returns an error, with the reason, when events are not
// available; the probe is then polled only.
type EventSource interface {
	Watch(ctx context.Context, wake chan<- struct{}) error
}

func wakeUp(wake chan<- struct{}) {
	select {
	case wake <- struct{}{}:
	default:
	}
}

// unknown makes s the sample of a source that could not be read; the
// monitor counts it in nodeward_probe_errors_total.
func unknown(s Signal, reason string, err error) Signal {
	s.Verdict, s.Reason, s.Message = Unknown, reason, err.Error()
	return s
}
