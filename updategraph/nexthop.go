package updategraph

import (
	"fmt"
	"math"
	"sort"
	"strconv"
	"strings"
	"time"
)

// Kind tells an unconditional update from one with risks to evaluate.
type Kind string

const (
	Unconditional Kind = "Unconditional"
	Conditional   Kind = "Conditional"
)

// Candidate is a release the pool may go to next.
type Candidate struct {
	Release Release
	Kind    Kind
	// Risks are the risks of a conditional candidate, to be evaluated
	// against the cluster before it is recommended.
	Risks []Risk
}

// Why a target of an edge out of the current release is not a candidate.
const (
	ExcludedDeadEnd      = "DeadEnd"
	ExcludedRolledBack   = "RolledBack"
	ExcludedThrottled    = "Throttled"
	ExcludedSkipsBarrier = "SkipsBarrier"
	ExcludedDowngrade    = "Downgrade"
	ExcludedAmbiguous    = "AmbiguousRisks"
)

// Exclusion is a target refused, with the reason (one of the Excluded
// constants) and a message for the pool's status.
type Exclusion struct {
	Version string
	Reason  string
	Message string
}

// Policy is what decides beyond the graph: the releases denied because they
// rolled back on a node of the pool (versions, payloads or digests), the
// pool's rollout wariness in [0,1] (0 takes a rollout at its start, 1 only
// once complete), and the time.
type Policy struct {
	Denied   []string
	Wariness float64
	Now      time.Time
}

// Hops is the answer of NextHops.
type Hops struct {
	Current Release
	// Candidates, newest first.
	Candidates []Candidate
	Excluded   []Exclusion
}

// Next is the hop to take without evaluating risks: the newest
// unconditional candidate. With a barrier ahead, that is the barrier.
func (h Hops) Next() (Candidate, bool) {
	for _, c := range h.Candidates {
		if c.Kind == Unconditional {
			return c, true
		}
	}
	return Candidate{}, false
}

// NextHops lists where a pool whose nodes run the given releases may go
// next. The targets are those of the edges out of the current release; a
// target reached both unconditionally and conditionally is conditional,
// and one reached by two conditional groups is refused, as the cluster
// version operator does. A target is refused when it is a dead-end, was
// denied, lies past a barrier after the current release, is older than it,
// or is under a rollout that does not admit the pool's wariness yet. No
// edge leaves a dead-end.
func NextHops(g *Graph, running []Running, p Policy) (Hops, error) {
	if math.IsNaN(p.Wariness) || p.Wariness < 0 || p.Wariness > 1 {
		return Hops{}, fmt.Errorf("rollout wariness %v is outside [0,1]", p.Wariness)
	}
	from, err := g.current(running)
	if err != nil {
		return Hops{}, err
	}
	hops := Hops{Current: g.Releases[from]}
	if hops.Current.DeadEnd {
		return hops, nil
	}
	targets := g.targets(from, &hops.Excluded)
	for _, c := range targets {
		if c.Release.Rollout != nil && p.Now.IsZero() {
			return Hops{}, fmt.Errorf("%s is under a rollout, and no time was given to throttle it with (Policy.Now)", c.Release.Version)
		}
	}
	for _, c := range targets {
		if reason, message, refused := g.refuse(from, c.Release, p); refused {
			hops.Excluded = append(hops.Excluded, Exclusion{Version: c.Release.Version, Reason: reason, Message: message})
			continue
		}
		hops.Candidates = append(hops.Candidates, c)
	}
	g.sortNewestFirst(hops.Candidates)
	return hops, nil
}

// targets gathers the targets of the edges out of from, conditional ones
// winning over unconditional ones; a target of two conditional groups is
// recorded as excluded.
func (g *Graph) targets(from int, excluded *[]Exclusion) []Candidate {
	byVersion := map[string]Candidate{}
	var order []string
	for _, to := range g.successors(from) {
		r := g.Releases[to]
		byVersion[r.Version] = Candidate{Release: r, Kind: Unconditional}
		order = append(order, r.Version)
	}
	groups := map[string]int{}
	for _, group := range g.ConditionalEdges {
		for _, e := range group.Edges {
			if e.From != g.Releases[from].Version {
				continue
			}
			groups[e.To]++
			if _, seen := byVersion[e.To]; !seen {
				order = append(order, e.To)
			}
			r, _ := g.Release(e.To)
			byVersion[e.To] = Candidate{Release: r, Kind: Conditional, Risks: group.Risks}
		}
	}
	var out []Candidate
	for _, version := range order {
		if groups[version] > 1 {
			*excluded = append(*excluded, Exclusion{Version: version, Reason: ExcludedAmbiguous,
				Message: fmt.Sprintf("%d conditional update groups lead to %s: dropped, as the cluster version operator drops them", groups[version], version)})
			continue
		}
		out = append(out, byVersion[version])
	}
	return out
}

// refusal is one rule that may refuse a target, in the order checked.
type refusal struct {
	reason string
	check  func(g *Graph, from int, to Release, p Policy) (string, bool)
}

func refusals() []refusal {
	return []refusal{
		{ExcludedDeadEnd, refuseDeadEnd},
		{ExcludedRolledBack, refuseDenied},
		{ExcludedDowngrade, refuseDowngrade},
		{ExcludedSkipsBarrier, refuseSkipsBarrier},
		{ExcludedThrottled, refuseThrottled},
	}
}

func (g *Graph) refuse(from int, to Release, p Policy) (reason, message string, refused bool) {
	for _, rule := range refusals() {
		if message, refused := rule.check(g, from, to, p); refused {
			return rule.reason, message, true
		}
	}
	return "", "", false
}

func refuseDeadEnd(_ *Graph, _ int, to Release, _ Policy) (string, bool) {
	if !to.DeadEnd {
		return "", false
	}
	return fmt.Sprintf("%s is a dead-end (%s): no update leaves it", to.Version, orUnknown(to.DeadEndReason)), true
}

func refuseDenied(_ *Graph, _ int, to Release, p Policy) (string, bool) {
	for _, id := range p.Denied {
		if identifies(to, id) {
			return fmt.Sprintf("%s rolled back on a node of the pool (denied as %s)", to.Version, id), true
		}
	}
	return "", false
}

func refuseDowngrade(g *Graph, from int, to Release, _ Policy) (string, bool) {
	if !g.ordered || to.Order > g.Releases[from].Order {
		return "", false
	}
	return fmt.Sprintf("%s is older than %s", to.Version, g.Releases[from].Version), true
}

func refuseSkipsBarrier(g *Graph, from int, to Release, _ Policy) (string, bool) {
	if !g.ordered {
		return "", false
	}
	current := g.Releases[from].Order
	for _, r := range g.Releases {
		if r.Barrier && r.Order > current && r.Order < to.Order {
			return fmt.Sprintf("%s lies past the barrier %s (%s): the barrier comes first", to.Version, r.Version, orUnknown(r.BarrierReason)), true
		}
	}
	return "", false
}

func refuseThrottled(_ *Graph, _ int, to Release, p Policy) (string, bool) {
	if to.Rollout == nil || to.Rollout.Admits(p.Wariness, p.Now) {
		return "", false
	}
	return fmt.Sprintf("%s is rolling out to %.4g%% of nodes at %s; the pool's wariness %.4g waits for %.4g%%",
		to.Version, 100*to.Rollout.Fraction(p.Now), p.Now.UTC().Format(time.RFC3339), p.Wariness, 100*p.Wariness), true
}

func orUnknown(reason string) string {
	if reason == "" {
		return "no reason given"
	}
	return reason
}

// sortNewestFirst orders candidates by age when the graph gives one, else
// by version.
func (g *Graph) sortNewestFirst(cs []Candidate) {
	sort.SliceStable(cs, func(i, j int) bool {
		if g.ordered {
			return cs[i].Release.Order > cs[j].Release.Order
		}
		return CompareVersions(cs[i].Release.Version, cs[j].Release.Version) > 0
	})
}

// CompareVersions compares dotted numeric versions field by field
// (4.18.10 after 4.18.9; 44.20260707.3.1 after 44.20260621.3.1); a
// pre-release ("4.18.0-rc.1") comes before its release. The one order of
// releases of the graph and of the risks' evaluation (updaterisk).
func CompareVersions(a, b string) int {
	mainA, preA, _ := strings.Cut(a, "-")
	mainB, preB, _ := strings.Cut(b, "-")
	if c := compareFields(mainA, mainB); c != 0 {
		return c
	}
	switch {
	case preA == preB:
		return 0
	case preA == "":
		return 1
	case preB == "":
		return -1
	}
	return compareFields(preA, preB)
}

// compareFields compares dot-separated fields, numerically where both are
// numbers (rc.9 before rc.10).
func compareFields(a, b string) int {
	fa, fb := strings.Split(a, "."), strings.Split(b, ".")
	for i := 0; i < max(len(fa), len(fb)); i++ {
		if c := compareField(fieldAt(fa, i), fieldAt(fb, i)); c != 0 {
			return c
		}
	}
	return 0
}

func fieldAt(fields []string, i int) string {
	if i < len(fields) {
		return fields[i]
	}
	return "0"
}

func compareField(a, b string) int {
	na, errA := strconv.ParseUint(a, 10, 64)
	nb, errB := strconv.ParseUint(b, 10, 64)
	if errA == nil && errB == nil {
		switch {
		case na < nb:
			return -1
		case na > nb:
			return 1
		}
		return 0
	}
	return strings.Compare(a, b)
}
