package chaos

import (
	"fmt"
	"strings"
	"time"
)

// The summary a chaos run prints and writes (NODEWARD_CHAOS_SUMMARY).

func summarize(sz size, seed int64, replay string, nodes int, setup, firstGrant time.Duration,
	rolloutStart, faultsStart, lastInjected, lastUndone, convergedAt time.Time, converged bool,
	records []*Record, violations []Violation, st Stats, machines map[string]*Machine, replicas []*Replica) string {
	var b strings.Builder
	rel := func(at time.Time) string { return "+" + at.Sub(rolloutStart).Round(100*time.Millisecond).String() }
	fmt.Fprintf(&b, "=== chaos run: size %s, %d agents (%d control-plane, %d+%d workers) in %d zones, seed %d\n",
		sz.name, nodes, sz.controlPlane, sz.workersA, sz.workersB, len(zones), seed)
	fmt.Fprintf(&b, "replay: %s\n", replay)
	fmt.Fprintf(&b, "setup %s; times from the pools' creation: first grant %s, faults %s … %s, last undone %s, ",
		setup.Round(100*time.Millisecond), "+"+firstGrant.Round(100*time.Millisecond).String(), rel(faultsStart), rel(lastInjected), rel(lastUndone))
	if converged {
		fmt.Fprintf(&b, "converged %s (%s after the last fault was injected, %s after the last was undone)\n", rel(convergedAt),
			convergedAt.Sub(lastInjected).Round(100*time.Millisecond), convergedAt.Sub(lastUndone).Round(100*time.Millisecond))
	} else {
		fmt.Fprintf(&b, "NOT converged at %s\n", rel(convergedAt))
	}
	type count struct{ injected, skipped, inFlight int }
	counts := map[Kind]*count{}
	for _, k := range Kinds() {
		counts[k] = &count{}
	}
	for _, r := range records {
		c := counts[r.Kind]
		if r.Skipped {
			c.skipped++
			continue
		}
		c.injected++
		if r.InFlight {
			c.inFlight++
		}
	}
	total, inFlight := 0, 0
	fmt.Fprintf(&b, "faults (injected, of which during the rollout; skipped):\n")
	for _, k := range Kinds() {
		c := counts[k]
		total += c.injected
		inFlight += c.inFlight
		fmt.Fprintf(&b, "  %-22s %3d %3d  %d\n", k, c.injected, c.inFlight, c.skipped)
	}
	fmt.Fprintf(&b, "  %-22s %3d %3d\n", "total", total, inFlight)
	fmt.Fprintf(&b, "violations: %d\n", len(violations))
	for _, v := range violations {
		fmt.Fprintf(&b, "  %s\n", v)
	}
	fmt.Fprintf(&b, "watcher: %d node events, %d pool events, %d watch gaps, %d grants checked, %d reboots checked (%d unverified), %d finalizations after a gap (steps unverified)\n",
		st.NodeEvents, st.PoolEvents, st.Gaps, st.Grants, st.RebootsChecked, st.RebootsUnverified, st.StepsUnverified)
	fmt.Fprintf(&b, "watcher: %d Nodes deleted holding a grant (counted until they served again), %d PDB-blocked pods forced under Force, %d halts (a gate that failed during a soak)\n",
		st.Departures, st.PinsForced, st.Halts)
	fmt.Fprintf(&b, "most disrupted at once: control-plane %d (limit 1), workers-a %d (limit %d at start), workers-b %d (limit %d at start)\n",
		st.MaxDisrupted[cpPool], st.MaxDisrupted["workers-a"], sz.maxA, st.MaxDisrupted["workers-b"], sz.maxB)
	boots, kills, exits := 0, 0, 0
	for _, m := range machines {
		b, k, e := m.Counts()
		boots, kills, exits = boots+b, kills+k, exits+e
	}
	fmt.Fprintf(&b, "agents: %d boots, %d killed, %d exits of their own\n", boots, kills, exits)
	for _, r := range replicas {
		s, k, e := r.Counts()
		fmt.Fprintf(&b, "%s: %d starts, %d killed, %d exits of its own\n", r.Name, s, k, e)
	}
	fmt.Fprintf(&b, "fault timeline:\n")
	for _, r := range records {
		fmt.Fprintf(&b, "  %s %s\n", rel(r.At), r)
	}
	return b.String()
}
