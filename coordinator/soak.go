package coordinator

import (
	"fmt"
	"strings"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/intstr"

	"github.com/nodeward/nodeward/api/v1alpha1"
)

// gateVerdict is the gates' answer the plan reads: nil in planInput means
// not evaluated yet, and a plan that needs it asks for it (needGates)
// instead of granting or ending a soak.
type gateVerdict struct {
	passing         bool
	reason, message string
}

// canaryPhase is where the pool stands in its canary: active while fewer
// than total canaries run the target with their slot given back. While it
// is active the pool grants one node at a time, only canaries, and a
// canary that fails halts it.
type canaryPhase struct {
	active      bool
	total, done int
	bySelector  bool
	bake        time.Duration
	// none says why no node can be a canary (a selector that matches none
	// of the pool's nodes): the pool halts rather than roll out without
	// one. Empty when the canary can run.
	none string
}

// haltNoCanary is the Halted condition's reason for a canary that no node
// can be.
const haltNoCanary = "NoCanaryNode"

// canaryOf resolves the pool's canary over its managed nodes.
func canaryOf(spec v1alpha1.UpdatePoolSpec, managed []*nodeView, target string) (canaryPhase, error) {
	c := spec.Canary
	if c == nil || target == "" {
		return canaryPhase{}, nil
	}
	bake, err := parseDuration(c.Bake, "canary.bake")
	if err != nil {
		return canaryPhase{}, err
	}
	phase := canaryPhase{bake: bake, bySelector: c.Selector != nil}
	// ConfigName(spec) names target (the pool plans spec.OSImage).
	config := ConfigName(spec)
	if c.Selector != nil {
		phase.selectorCanaries(c.Selector, managed, target, config)
	} else if err := phase.countedCanaries(c.Nodes, managed, target, config); err != nil {
		return canaryPhase{}, err
	}
	phase.active = phase.done < phase.total
	return phase, nil
}

// selectorCanaries counts the canaries a selector names: those that ran
// the target under a grant for it, and those that still need it. A
// selector that matches none of them while nodes still need the target (a
// label typo, or only canaries that ran the target before) leaves the pool
// without a canary: that is reported (none), never skipped, so the pool
// does not go on at full maxUnavailable untested.
func (phase *canaryPhase) selectorCanaries(sel *metav1.LabelSelector, managed []*nodeView, target, config string) {
	matched, left := 0, false
	for _, n := range managed {
		left = left || !n.updated(target)
		if !n.canary {
			continue
		}
		matched++
		switch {
		case canaryDone(n, target, config):
			phase.done++
			phase.total++
		case !n.updated(target):
			phase.total++
		}
	}
	switch {
	case !left || phase.total > 0:
	case matched == 0:
		phase.none = fmt.Sprintf("canary.selector %s matches none of the pool's %d nodes: nothing is granted until it names the canaries (label them, or fix the selector)",
			metav1.FormatLabelSelector(sel), len(managed))
	default:
		phase.none = fmt.Sprintf("canary.selector %s matches only nodes that ran the target before, outside this canary (%d): none can bake it; label nodes that still need the target",
			metav1.FormatLabelSelector(sel), matched)
	}
}

// countedCanaries counts the canaries canary.nodes asks for: the nodes
// that ran the target under a grant for it, then as many of the nodes that
// still need it. A node that ran the target before (a new node, one
// updated outside the pool) was never a canary of this target.
func (phase *canaryPhase) countedCanaries(nodes *intstr.IntOrString, managed []*nodeView, target, config string) error {
	if nodes == nil {
		nodes = &intstr.IntOrString{Type: intstr.Int, IntVal: 1}
	}
	total, err := countOrPercent(nodes, len(managed), "canary.nodes")
	if err != nil {
		return err
	}
	left := 0
	for _, n := range managed {
		switch {
		case canaryDone(n, target, config):
			phase.done++
		case !n.updated(target):
			left++
		}
	}
	phase.total = min(total, phase.done+left)
	return nil
}

// canaryDone reports whether n is a canary of target that is done: it
// runs target with its slot given back, and the grant it last reported on
// was issued for target (grant names start with the target's config name,
// grantNames.next). A node that ran target before any grant for it does
// not count.
func canaryDone(n *nodeView, target, config string) bool {
	return n.updated(target) && !n.granted() && strings.HasPrefix(n.stateGrnt, config+"-")
}

// soakFor is how long n keeps its slot after Done: the canary's bake for
// the last canary, else the pool's soak (0: none).
func soakFor(spec v1alpha1.UpdatePoolSpec, canary canaryPhase) (time.Duration, error) {
	if canary.active && canary.done+1 >= canary.total {
		return canary.bake, nil
	}
	return parseDuration(spec.Soak, "soak")
}

// parseDuration reads an optional Go duration of the pool's spec; field
// names it in errors.
func parseDuration(s, field string) (time.Duration, error) {
	if s == "" {
		return 0, nil
	}
	d, err := time.ParseDuration(s)
	if err != nil || d < 0 {
		return 0, fmt.Errorf("%s %q: want a non-negative Go duration such as 10m", field, s)
	}
	return d, nil
}

// soakStep is what a finished grant's soak calls for now.
type soakStep int

const (
	soakNone  soakStep = iota // no soak: release as before
	soakStart                 // Done just seen: write soak-until, keep the slot
	soakOn                    // soaking: keep the slot, re-check the gates
	soakOver                  // soak over: release once the gates pass
)

// why is how a soaking node counts in the pool's Updating condition.
func (s soakStep) why(until time.Time) string {
	switch s {
	case soakStart:
		return "soaking from now"
	case soakOver:
		return "soak over, released once the gates pass"
	}
	return "soaking until " + until.UTC().Format(time.RFC3339)
}

// soakEnd is when a soak of d that starts at now ends, rounded up to the
// second soak-until keeps (RFC 3339): a soak never ends early.
func soakEnd(now time.Time, d time.Duration) time.Time {
	end := now.Add(d)
	if r := end.Truncate(time.Second); !r.Equal(end) {
		return r.Add(time.Second)
	}
	return end
}

// soakOf decides n's soak: only a Done grant the pool releases soaks.
func soakOf(n *nodeView, d time.Duration, now time.Time) soakStep {
	if n.state != v1alpha1.StepDone {
		return soakNone
	}
	switch {
	case !n.soakUntil.IsZero() && now.Before(n.soakUntil):
		return soakOn
	case !n.soakUntil.IsZero():
		return soakOver
	case d > 0:
		return soakStart
	}
	return soakNone
}
