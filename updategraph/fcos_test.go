package updategraph

import (
	"reflect"
	"strings"
	"testing"
	"time"
)

// stableRollouts are the two releases under rollout in the stable
// snapshot: 44.20260621.3.1 at 100% (no start, no duration), and
// 44.20260707.3.1 from 0% at 2026-07-22 14:00 UTC over 2880 minutes.
var (
	rolloutStart = time.Unix(1784728800, 0)
	rolloutHalf  = rolloutStart.Add(24 * time.Hour)
)

// TestFCOSStableSnapshot checks the graph built from the real stable
// metadata against what that metadata says, counted independently of the
// builder: its barriers, its rollouts, and an edge into a barrier from
// every release since the barrier before.
func TestFCOSStableSnapshot(t *testing.T) {
	g := fcosGraph(t, "stable", Scope{Arch: "x86_64"})
	updates, err := ParseUpdates(readTestdata(t, "fcos/updates/stable.json"))
	if err != nil {
		t.Fatal(err)
	}
	var barriers, rollouts []string
	for _, u := range updates.Releases {
		if u.Metadata.Barrier != nil {
			barriers = append(barriers, u.Version)
		}
		if u.Metadata.Rollout != nil {
			rollouts = append(rollouts, u.Version)
		}
	}
	if len(g.Releases) != 179 || len(barriers) != 19 || len(rollouts) != 2 {
		t.Fatalf("%d releases, %d barriers, %d rollouts; want 179, 19, 2", len(g.Releases), len(barriers), len(rollouts))
	}
	var gotBarriers, gotRollouts []string
	for _, r := range g.Releases {
		if r.Barrier {
			gotBarriers = append(gotBarriers, r.Version)
			if !strings.HasPrefix(r.BarrierReason, "https://") {
				t.Errorf("barrier %s: reason %q", r.Version, r.BarrierReason)
			}
		}
		if r.Rollout != nil {
			gotRollouts = append(gotRollouts, r.Version)
		}
		if r.Metadata[KeyScheme] != SchemeChecksum || len(r.Payload) != 64 {
			t.Errorf("%s: payload %q scheme %q; want a checksum", r.Version, r.Payload, r.Metadata[KeyScheme])
		}
	}
	if !reflect.DeepEqual(gotBarriers, barriers) || !reflect.DeepEqual(gotRollouts, rollouts) {
		t.Errorf("barriers %v, rollouts %v in the graph; the metadata has %v and %v", gotBarriers, gotRollouts, barriers, rollouts)
	}
	// Every edge goes into a barrier or a rollout with no barrier between.
	for _, e := range g.Edges {
		to := g.Releases[e.To]
		if !to.Barrier && to.Rollout == nil {
			t.Errorf("edge %s → %s: into neither a barrier nor a rollout", g.Releases[e.From].Version, to.Version)
		}
		for _, between := range g.Releases[e.From+1 : e.To] {
			if between.Barrier {
				t.Errorf("edge %s → %s skips the barrier %s", g.Releases[e.From].Version, to.Version, between.Version)
			}
		}
	}
	last, _ := g.Release("44.20260707.3.1")
	if r := last.Rollout; r == nil || r.StartEpoch != rolloutStart.Unix() || r.Duration != 2880*time.Minute || r.StartValue != 0 {
		t.Errorf("44.20260707.3.1's rollout: %+v", last.Rollout)
	}
}

// TestFCOSNextHopIsTheNextBarrier: from every release of the stable
// snapshot, the next hop is the first barrier after it, or, past the last
// barrier, the newest rollout the pool's wariness admits; never further.
func TestFCOSNextHopIsTheNextBarrier(t *testing.T) {
	g := fcosGraph(t, "stable", Scope{Arch: "x86_64"})
	policy := Policy{Wariness: 0.5, Now: rolloutHalf}
	for i, r := range g.Releases {
		want := ""
		for _, later := range g.Releases[i+1:] {
			if later.Barrier {
				want = later.Version
				break
			}
		}
		if want == "" && r.Version != "44.20260707.3.1" {
			want = "44.20260707.3.1"
			if r.Version == want {
				want = ""
			}
		}
		hops, err := NextHops(g, on(r.Version, "n1", "n2"), policy)
		if err != nil {
			t.Fatalf("from %s: %v", r.Version, err)
		}
		next, ok := hops.Next()
		if got := next.Release.Version; got != want || ok != (want != "") {
			t.Errorf("from %s: next %q, want %q (candidates %v)", r.Version, got, want, versionsOf(hops.Candidates))
		}
	}
}

func TestFCOSThrottlingDeniedAndOCI(t *testing.T) {
	g := fcosGraph(t, "stable", Scope{Arch: "x86_64"})
	lastBarrier := on("43.20260413.3.2", "n1")
	cases := []struct {
		name     string
		policy   Policy
		want     []string
		excluded map[string]string
	}{
		{"half way, wariness 0.5", Policy{Wariness: 0.5, Now: rolloutHalf}, []string{"44.20260707.3.1", "44.20260621.3.1"}, map[string]string{}},
		{"half way, wariness 0.6", Policy{Wariness: 0.6, Now: rolloutHalf}, []string{"44.20260621.3.1"}, map[string]string{"44.20260707.3.1": ExcludedThrottled}},
		{"before the start, wariness 0", Policy{Wariness: 0, Now: rolloutStart.Add(-time.Minute)}, []string{"44.20260707.3.1", "44.20260621.3.1"}, map[string]string{}},
		{"at the end, wariness 1", Policy{Wariness: 1, Now: rolloutStart.Add(2880 * time.Minute)}, []string{"44.20260707.3.1", "44.20260621.3.1"}, map[string]string{}},
		{"rolled back by version", Policy{Denied: []string{"44.20260707.3.1"}, Now: rolloutHalf}, []string{"44.20260621.3.1"}, map[string]string{"44.20260707.3.1": ExcludedRolledBack}},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			hops, err := NextHops(g, lastBarrier, c.policy)
			if err != nil {
				t.Fatal(err)
			}
			if got := versionsOf(hops.Candidates); !reflect.DeepEqual(got, c.want) {
				t.Errorf("candidates %v, want %v", got, c.want)
			}
			excluded := map[string]string{}
			for _, e := range hops.Excluded {
				excluded[e.Version] = e.Reason
			}
			if !reflect.DeepEqual(excluded, c.excluded) {
				t.Errorf("excluded %+v, want %v", hops.Excluded, c.excluded)
			}
		})
	}
	// "Before the start, wariness 0": the fraction is 0 and a node of
	// wariness 0 is not warier than it, as in the policy engine.

	// The OCI graph: nodes found by image digest, a rollback denied by it.
	oci := fcosGraph(t, "stable", Scope{Arch: "x86_64", OCI: true})
	from, _ := oci.Release("43.20260413.3.2")
	denied, _ := oci.Release("44.20260707.3.1")
	digest := func(r Release) string { return r.Payload[strings.LastIndexByte(r.Payload, '@')+1:] }
	hops, err := NextHops(oci, []Running{{Node: "n1", ImageDigest: digest(from)}}, Policy{Denied: []string{digest(denied)}, Now: rolloutHalf})
	if err != nil {
		t.Fatal(err)
	}
	if hops.Current.Version != from.Version || !reflect.DeepEqual(versionsOf(hops.Candidates), []string{"44.20260621.3.1"}) {
		t.Errorf("OCI: current %s, candidates %v", hops.Current.Version, versionsOf(hops.Candidates))
	}
	if len(hops.Excluded) != 1 || hops.Excluded[0].Reason != ExcludedRolledBack || !strings.Contains(hops.Excluded[0].Message, "rolled back") {
		t.Errorf("OCI: excluded %+v", hops.Excluded)
	}
}

// TestFCOSDeadEnds: in the testing and next snapshots a dead-end has no
// edge out; a pool on it has no next hop and says why.
func TestFCOSDeadEnds(t *testing.T) {
	for stream, deadEnd := range map[string]string{"testing": "30.20190716.1", "next": "38.20230310.1.0"} {
		g := fcosGraph(t, stream, Scope{Arch: "x86_64"})
		at := g.byVersion[deadEnd]
		if !g.Releases[at].DeadEnd || g.Releases[at].DeadEndReason == "" {
			t.Errorf("%s: %s is not marked a dead-end with a reason: %+v", stream, deadEnd, g.Releases[at])
		}
		for _, e := range g.Edges {
			if e.From == at {
				t.Errorf("%s: an edge leaves the dead-end %s, to %s", stream, deadEnd, g.Releases[e.To].Version)
			}
		}
		hops, err := NextHops(g, on(deadEnd, "n1"), Policy{})
		if err != nil || len(hops.Candidates) != 0 || !hops.Current.DeadEnd {
			t.Errorf("%s: from the dead-end: %+v, %v", stream, hops, err)
		}
	}
}

func TestParseFCOSMetadataErrors(t *testing.T) {
	cases := []struct{ name, doc, want string }{
		{"updates: no stream", `{"releases":[]}`, "stream: missing"},
		{"updates: no version", `{"stream":"stable","releases":[{"metadata":{}}]}`, "releases[0].version: missing"},
		{"updates: percentage over 1", `{"stream":"stable","releases":[{"version":"1","metadata":{"rollout":{"start_percentage":2}}}]}`, "releases[0].metadata.rollout.start_percentage: 2 is outside [0,1]"},
		{"updates: epoch a string", `{"stream":"stable","releases":[{"version":"1","metadata":{"rollout":{"start_epoch":"x"}}}]}`, "updates.releases.metadata.rollout.start_epoch: a JSON string"},
		{"updates: negative duration", `{"stream":"stable","releases":[{"version":"1","metadata":{"rollout":{"duration_minutes":-1}}}]}`, "duration_minutes: a JSON number -1"},
	}
	for _, c := range cases {
		if _, err := ParseUpdates([]byte(c.doc)); err == nil || !strings.Contains(err.Error(), c.want) {
			t.Errorf("%s: %v; want an error containing %q", c.name, err, c.want)
		}
	}
	if _, err := ParseReleaseIndex([]byte(`{"releases":[{"version":"1"},{"version":"1"}]}`)); err == nil || !strings.Contains(err.Error(), `releases[1].version: "1" is also releases[0]'s`) {
		t.Errorf("duplicate version in the index: %v", err)
	}
	if _, err := ParseReleaseIndex([]byte(`{"releases":[{"version":"1","commits":[{"architecture":1}]}]}`)); err == nil || !strings.Contains(err.Error(), "commits.architecture: a JSON number") {
		t.Errorf("a commit's architecture a number: %v", err)
	}
}
