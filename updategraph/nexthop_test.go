package updategraph

import (
	"reflect"
	"strings"
	"testing"
	"time"
)

func on(version string, nodes ...string) []Running {
	var out []Running
	for _, n := range nodes {
		out = append(out, Running{Node: n, Version: version})
	}
	return out
}

func TestNextHopsOpenShift(t *testing.T) {
	g := openshiftGraph(t)
	hops, err := NextHops(g, on("4.17.18", "a", "b"), Policy{})
	if err != nil {
		t.Fatal(err)
	}
	if got := versionsOf(hops.Candidates); !reflect.DeepEqual(got, []string{"4.17.20", "4.17.19"}) {
		t.Fatalf("candidates from 4.17.18: %v", got)
	}
	// 4.17.18 → 4.17.19 is an edge and a conditional edge: conditional.
	if c := hops.Candidates[1]; c.Kind != Conditional || len(c.Risks) != 1 || c.Risks[0].Name != "AROBrokenDNSMasq" {
		t.Errorf("4.17.19: %+v; want conditional with AROBrokenDNSMasq", c)
	}
	if next, ok := hops.Next(); !ok || next.Release.Version != "4.17.20" || next.Kind != Unconditional {
		t.Errorf("Next: %+v %v; want 4.17.20 unconditional", next, ok)
	}
}

func TestNextHopsOpenShiftDropsAmbiguousConditionalUpdates(t *testing.T) {
	hops, err := NextHops(openshiftGraph(t), on("4.17.20", "a"), Policy{})
	if err != nil {
		t.Fatal(err)
	}
	if got := versionsOf(hops.Candidates); !reflect.DeepEqual(got, []string{"4.18.1", "4.18.0"}) {
		t.Fatalf("candidates from 4.17.20: %v", got)
	}
	if c := hops.Candidates[1]; c.Kind != Conditional || c.Risks[0].Name != "PreRelease" || c.Risks[0].MatchingRules[0].Type != RuleAlways {
		t.Errorf("4.18.0: %+v", c)
	}
	if len(hops.Excluded) != 1 || hops.Excluded[0].Version != "4.18.2" || hops.Excluded[0].Reason != ExcludedAmbiguous {
		t.Errorf("excluded: %+v; want 4.18.2 %s", hops.Excluded, ExcludedAmbiguous)
	}
}

func TestNextHopsFindsNodesByPayload(t *testing.T) {
	g := openshiftGraph(t)
	r, _ := g.Release("4.17.19")
	digest := r.Payload[strings.LastIndexByte(r.Payload, '@')+1:]
	for _, run := range []Running{
		{Node: "by-pullspec", ImageDigest: r.Payload},
		{Node: "by-digest", ImageDigest: digest},
		{Node: "by-version-and-digest", Version: "4.17.19", ImageDigest: digest},
	} {
		hops, err := NextHops(g, []Running{run}, Policy{})
		if err != nil || hops.Current.Version != "4.17.19" {
			t.Errorf("%s: current %q, %v; want 4.17.19", run.Node, hops.Current.Version, err)
		}
	}
}

func TestNextHopsRefusesWhatItCannotPlace(t *testing.T) {
	g := openshiftGraph(t)
	other, _ := g.Release("4.17.20")
	cases := []struct {
		name    string
		running []Running
		policy  Policy
		want    string
	}{
		{"no nodes", nil, Policy{}, "no nodes"},
		{"unknown version", on("4.16.0", "a"), Policy{}, "node a runs 4.16.0, which is not in the graph"},
		{"unknown digest", []Running{{Node: "a", ImageDigest: "sha256:00"}}, Policy{}, "not in the graph"},
		{"no identifier", []Running{{Node: "a"}}, Policy{}, "node a reports no version"},
		{"identifiers disagree", []Running{{Node: "a", Version: "4.17.19", ImageDigest: other.Payload}}, Policy{}, "another of its identifiers"},
		{"mixed pool", append(on("4.17.18", "a", "b"), on("4.17.20", "c")...), Policy{}, "run 2 releases (a,b on 4.17.18; c on 4.17.20)"},
		{"wariness over 1", on("4.17.18", "a"), Policy{Wariness: 1.5}, "wariness 1.5 is outside [0,1]"},
		{"wariness negative", on("4.17.18", "a"), Policy{Wariness: -0.1}, "outside [0,1]"},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			_, err := NextHops(g, c.running, c.policy)
			if err == nil || !strings.Contains(err.Error(), c.want) {
				t.Fatalf("NextHops: %v; want an error containing %q", err, c.want)
			}
		})
	}
}

// smallFCOS is a Fedora CoreOS graph in the service's JSON: age indexes,
// a barrier at 2, an edge (not one the graph builder would make) from 0
// past it to 3, a release under rollout at 3 that is also a dead-end.
const smallFCOS = `{"nodes":[
 {"version":"40.1.3.0","payload":"c0","metadata":{"org.fedoraproject.coreos.releases.age_index":"0"}},
 {"version":"40.2.3.0","payload":"c1","metadata":{"org.fedoraproject.coreos.releases.age_index":"1"}},
 {"version":"40.3.3.0","payload":"c2","metadata":{"org.fedoraproject.coreos.releases.age_index":"2","org.fedoraproject.coreos.updates.barrier":"true","org.fedoraproject.coreos.updates.barrier_reason":"https://example.com/keys"}},
 {"version":"41.1.3.0","payload":"c3","metadata":{"org.fedoraproject.coreos.releases.age_index":"3","org.fedoraproject.coreos.updates.rollout":"true","org.fedoraproject.coreos.updates.deadend":"true","org.fedoraproject.coreos.updates.deadend_reason":"broken bootloader"}},
 {"version":"41.2.3.0","payload":"c4","metadata":{"org.fedoraproject.coreos.releases.age_index":"4","org.fedoraproject.coreos.updates.rollout":"true"}}
],"edges":[[0,2],[1,2],[0,3],[0,4],[2,3],[2,4],[3,4],[4,1]]}`

func TestNextHopsNeverSkipsABarrierNorGoesToADeadEnd(t *testing.T) {
	g, err := Parse([]byte(smallFCOS))
	if err != nil {
		t.Fatal(err)
	}
	hops, err := NextHops(g, on("40.1.3.0", "a"), Policy{Now: time.Unix(1e9, 0)})
	if err != nil {
		t.Fatal(err)
	}
	if got := versionsOf(hops.Candidates); !reflect.DeepEqual(got, []string{"40.3.3.0"}) {
		t.Errorf("candidates from 40.1.3.0: %v; want only the barrier", got)
	}
	reasons := map[string]string{}
	for _, e := range hops.Excluded {
		reasons[e.Version] = e.Reason
	}
	want := map[string]string{"41.1.3.0": ExcludedDeadEnd, "41.2.3.0": ExcludedSkipsBarrier}
	if !reflect.DeepEqual(reasons, want) {
		t.Errorf("excluded: %+v; want %v", hops.Excluded, want)
	}
	// A rollout is not judged without the time.
	if _, err := NextHops(g, on("40.3.3.0", "a"), Policy{}); err == nil || !strings.Contains(err.Error(), "no time was given") {
		t.Errorf("a rollout without Policy.Now: %v; want an error", err)
	}
	// Out of a dead-end, no edge, whatever the graph says.
	hops, err = NextHops(g, on("41.1.3.0", "a"), Policy{})
	if err != nil || len(hops.Candidates) != 0 || !hops.Current.DeadEnd || hops.Current.DeadEndReason != "broken bootloader" {
		t.Errorf("from the dead-end: %+v, %v", hops, err)
	}
	// An edge back to an older release is a downgrade.
	hops, err = NextHops(g, on("41.2.3.0", "a"), Policy{})
	if err != nil || len(hops.Candidates) != 0 || len(hops.Excluded) != 1 || hops.Excluded[0].Reason != ExcludedDowngrade {
		t.Errorf("from 41.2.3.0: %+v, %v; want 40.2.3.0 refused as a downgrade", hops, err)
	}
}

func TestRolloutFraction(t *testing.T) {
	start := time.Date(2026, 7, 22, 14, 0, 0, 0, time.UTC)
	twoDays := Rollout{StartEpoch: start.Unix(), Duration: 48 * time.Hour}
	cases := []struct {
		name    string
		rollout Rollout
		at      time.Time
		want    float64
	}{
		{"before the start", twoDays, start.Add(-time.Second), 0},
		{"at the start", twoDays, start, 0},
		{"a quarter in", twoDays, start.Add(12 * time.Hour), 0.25},
		{"half way", twoDays, start.Add(24 * time.Hour), 0.5},
		{"at the end", twoDays, start.Add(48 * time.Hour), 1},
		{"after the end", twoDays, start.Add(72 * time.Hour), 1},
		{"from 20%, half way", Rollout{StartEpoch: start.Unix(), StartValue: 0.2, Duration: 48 * time.Hour}, start.Add(24 * time.Hour), 0.6},
		{"no duration stays at its start value", Rollout{StartEpoch: start.Unix(), StartValue: 0.3}, start.Add(1000 * time.Hour), 0.3},
		{"no duration, before the start", Rollout{StartEpoch: start.Unix(), StartValue: 0.3}, start.Add(-time.Hour), 0},
		{"complete: start value 1, no epoch", Rollout{StartValue: 1}, start, 1},
	}
	for _, c := range cases {
		if got := c.rollout.Fraction(c.at); got < c.want-1e-9 || got > c.want+1e-9 {
			t.Errorf("%s: fraction %v, want %v", c.name, got, c.want)
		}
	}
	half := start.Add(24 * time.Hour)
	if !twoDays.Admits(0.5, half) || twoDays.Admits(0.5000001, half) || !twoDays.Admits(0, start) || twoDays.Admits(1, half) {
		t.Error("Admits: a node is admitted when its wariness is at most the fraction, and only then")
	}
}

func TestCompareVersions(t *testing.T) {
	ordered := []string{"4.9.0", "4.10.0-rc.1", "4.10.0-rc.9", "4.10.0-rc.10", "4.10.0", "4.10.1", "44.20260621.3.1", "44.20260707.3.1"}
	for i := range ordered {
		for j := range ordered {
			got := CompareVersions(ordered[i], ordered[j])
			want := 0
			if i < j {
				want = -1
			} else if i > j {
				want = 1
			}
			if got != want {
				t.Errorf("CompareVersions(%s, %s) = %d, want %d", ordered[i], ordered[j], got, want)
			}
		}
	}
}
