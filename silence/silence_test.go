package silence_test

import (
	"context"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/nodeward/nodeward/api/v1alpha1"
	"github.com/nodeward/nodeward/silence"
	"github.com/nodeward/nodeward/test/cluster"
	"github.com/nodeward/nodeward/test/prom"
)

// TestKeeperWithAlertmanager runs the keeper against one real Alertmanager
// shared by its subtests; each uses a pool and nodes of its own, so they
// run in parallel without seeing each other's silences or alerts.
func TestKeeperWithAlertmanager(t *testing.T) {
	t.Parallel()
	am := prom.StartAlertmanager(t)
	for name, run := range map[string]func(*testing.T, *prom.Alertmanager){
		"CreateShrinkEmpty":    testCreateShrinkEmpty,
		"RestartAdopts":        testRestartAdopts,
		"OtherPoolsUntouched":  testOtherPoolsUntouched,
		"DuplicateExpired":     testDuplicateExpired,
		"RenewNearExpiry":      testRenewNearExpiry,
		"MatchersChanged":      testMatchersChanged,
		"AlertSilenced":        testAlertSilenced,
		"InstanceLabelMatches": testInstanceLabelMatches,
	} {
		t.Run(name, func(t *testing.T) {
			t.Parallel()
			run(t, am)
		})
	}
}

// live returns the pool's unexpired silences by node, as the harness reads
// them (not through package silence); all, the pool's silences of any state.
func live(t *testing.T, am *prom.Alertmanager, pool string) (byNode map[string][]prom.Silence, all []prom.Silence) {
	t.Helper()
	byNode = map[string][]prom.Silence{}
	for _, s := range am.Silences(t) {
		_, rest, ok := strings.Cut(s.Comment, "nodeward: pool="+pool+" node=")
		if !ok || s.CreatedBy != "nodeward-coordinator" {
			continue
		}
		all = append(all, s)
		if s.State != "expired" {
			node, _, _ := strings.Cut(rest, ":")
			byNode[node] = append(byNode[node], s)
		}
	}
	return byNode, all
}

func syncOK(t *testing.T, k *silence.Keeper, pool string, spec *v1alpha1.Silences, nodes ...string) map[string]string {
	t.Helper()
	ids, err := k.Sync(context.Background(), pool, spec, nodes)
	if err != nil {
		t.Fatalf("Sync(%s, %v): %v", pool, nodes, err)
	}
	return ids
}

// wantOne checks that each node has exactly one live silence, with ids[node]
// as its ID, and that no other node has any.
func wantOne(t *testing.T, am *prom.Alertmanager, pool string, ids map[string]string, nodes ...string) map[string]prom.Silence {
	t.Helper()
	byNode, _ := live(t, am, pool)
	out := map[string]prom.Silence{}
	for _, n := range nodes {
		if len(byNode[n]) != 1 {
			t.Fatalf("node %s has %d live silences, want 1: %+v", n, len(byNode[n]), byNode[n])
		}
		if s := byNode[n][0]; s.ID != ids[n] {
			t.Errorf("node %s: Sync returned silence %q, Alertmanager has %q", n, ids[n], s.ID)
		}
		out[n] = byNode[n][0]
		delete(byNode, n)
	}
	for n, ss := range byNode {
		t.Errorf("node %s, not listed, still has live silences %+v", n, ss)
	}
	if len(ids) != len(nodes) {
		t.Errorf("Sync returned %v, want IDs for exactly %v", ids, nodes)
	}
	return out
}

func testCreateShrinkEmpty(t *testing.T, am *prom.Alertmanager) {
	spec := &v1alpha1.Silences{Alertmanager: am.URL + "/", Matchers: []v1alpha1.SilenceMatcher{
		{Name: "severity", Value: "critical|warning", IsRegex: true},
		{Name: "alertname", Value: "Watchdog", NotEqual: true},
	}}
	k := silence.NewKeeper(nil, nil)
	start := time.Now()
	ids := syncOK(t, k, "lifecycle", spec, "lc-a", "lc-b", "lc-a")
	got := wantOne(t, am, "lifecycle", ids, "lc-a", "lc-b")
	for _, n := range []string{"lc-a", "lc-b"} {
		s := got[n]
		want := []prom.SilenceMatcher{
			{Name: "node", Value: n + `(:[0-9]+)?`, IsRegex: true, IsEqual: true},
			{Name: "severity", Value: "critical|warning", IsRegex: true, IsEqual: true},
			{Name: "alertname", Value: "Watchdog", IsEqual: false},
		}
		if !slices.Equal(s.Matchers, want) {
			t.Errorf("node %s: matchers %+v, want %+v", n, s.Matchers, want)
		}
		if s.State != "active" {
			t.Errorf("node %s: state %s", n, s.State)
		}
		if d := s.EndsAt.Sub(start); d < silence.Lifetime-time.Minute || d > silence.Lifetime+time.Minute {
			t.Errorf("node %s: ends %v after Sync began, want about %v", n, d, silence.Lifetime)
		}
	}

	ids2 := syncOK(t, k, "lifecycle", spec, "lc-b")
	wantOne(t, am, "lifecycle", ids2, "lc-b")
	if ids2["lc-b"] != ids["lc-b"] {
		t.Errorf("lc-b's silence changed from %s to %s", ids["lc-b"], ids2["lc-b"])
	}
	_, all := live(t, am, "lifecycle")
	for _, s := range all {
		if s.ID == ids["lc-a"] && s.State != "expired" {
			t.Errorf("lc-a's silence is %s after Sync without it", s.State)
		}
	}

	wantOne(t, am, "lifecycle", syncOK(t, k, "lifecycle", spec))
}

func testRestartAdopts(t *testing.T, am *prom.Alertmanager) {
	spec := &v1alpha1.Silences{Alertmanager: am.URL}
	ids := syncOK(t, silence.NewKeeper(nil, nil), "adopt", spec, "ad-a", "ad-b")
	// A new keeper, as in a new coordinator: Alertmanager is the record.
	again := syncOK(t, silence.NewKeeper(nil, nil), "adopt", spec, "ad-b", "ad-a")
	wantOne(t, am, "adopt", again, "ad-a", "ad-b")
	if again["ad-a"] != ids["ad-a"] || again["ad-b"] != ids["ad-b"] {
		t.Errorf("after a restart the IDs are %v, before %v", again, ids)
	}
}

func testOtherPoolsUntouched(t *testing.T, am *prom.Alertmanager) {
	spec := &v1alpha1.Silences{Alertmanager: am.URL}
	k := silence.NewKeeper(nil, nil)
	theirs := syncOK(t, k, "theirs", spec, "ot-x")
	// By hand, with nodeward's comment but another author: not the keeper's.
	manual := am.PostSilence(t, prom.Silence{
		CreatedBy: "ops", Comment: "nodeward: pool=mine node=ot-y: copied by hand",
		Matchers: []prom.SilenceMatcher{{Name: "node", Value: "ot-y", IsEqual: true}},
	})
	mine := syncOK(t, k, "mine", spec, "ot-x")
	if mine["ot-x"] == theirs["ot-x"] {
		t.Errorf("pool mine adopted pool theirs' silence %s", mine["ot-x"])
	}
	wantOne(t, am, "mine", syncOK(t, k, "mine", spec))
	wantOne(t, am, "theirs", theirs, "ot-x")
	for _, s := range am.Silences(t) {
		if s.ID == manual && s.State != "active" {
			t.Errorf("the silence made by hand is %s", s.State)
		}
	}
}

func testDuplicateExpired(t *testing.T, am *prom.Alertmanager) {
	spec := &v1alpha1.Silences{Alertmanager: am.URL}
	k := silence.NewKeeper(nil, nil)
	first := syncOK(t, k, "dup", spec, "dp-a")
	byNode, _ := live(t, am, "dup")
	s := byNode["dp-a"][0]
	s.ID = ""
	s.EndsAt = time.Now().Add(50 * time.Minute) // shorter: the first one stays
	second := am.PostSilence(t, s)
	if byNode, _ = live(t, am, "dup"); len(byNode["dp-a"]) != 2 {
		t.Fatalf("the duplicate was not made: %+v", byNode)
	}
	ids := syncOK(t, k, "dup", spec, "dp-a")
	wantOne(t, am, "dup", ids, "dp-a")
	if ids["dp-a"] != first["dp-a"] {
		t.Errorf("kept %s, want the longer-lasting %s (the other was %s)", ids["dp-a"], first["dp-a"], second)
	}
}

func testRenewNearExpiry(t *testing.T, am *prom.Alertmanager) {
	spec := &v1alpha1.Silences{Alertmanager: am.URL}
	ids := syncOK(t, silence.NewKeeper(nil, nil), "renew", spec, "rn-a")
	before := wantOne(t, am, "renew", ids, "rn-a")["rn-a"]

	// Plenty left: left alone.
	later := func(d time.Duration) func() time.Time { return func() time.Time { return time.Now().Add(d) } }
	ids = syncOK(t, silence.NewKeeper(nil, later(30*time.Minute)), "renew", spec, "rn-a")
	if s := wantOne(t, am, "renew", ids, "rn-a")["rn-a"]; !s.EndsAt.Equal(before.EndsAt) {
		t.Errorf("with 30m left the silence's end moved from %v to %v", before.EndsAt, s.EndsAt)
	}

	// 10 minutes left: extended in place, the same ID.
	ids = syncOK(t, silence.NewKeeper(nil, later(50*time.Minute)), "renew", spec, "rn-a")
	after := wantOne(t, am, "renew", ids, "rn-a")["rn-a"]
	if after.ID != before.ID {
		t.Errorf("renewal replaced silence %s by %s", before.ID, after.ID)
	}
	if want := before.EndsAt.Add(50 * time.Minute); after.EndsAt.Before(want.Add(-time.Minute)) || after.EndsAt.After(want.Add(time.Minute)) {
		t.Errorf("renewed silence ends %v, want about %v", after.EndsAt, want)
	}
	if !after.StartsAt.Equal(before.StartsAt) || after.State != "active" {
		t.Errorf("renewed silence starts %v (was %v), state %s", after.StartsAt, before.StartsAt, after.State)
	}
}

func testMatchersChanged(t *testing.T, am *prom.Alertmanager) {
	spec := &v1alpha1.Silences{Alertmanager: am.URL}
	k := silence.NewKeeper(nil, nil)
	old := syncOK(t, k, "replace", spec, "rp-a")
	spec.Matchers = []v1alpha1.SilenceMatcher{{Name: "team", Value: "infra"}}
	ids := syncOK(t, k, "replace", spec, "rp-a")
	s := wantOne(t, am, "replace", ids, "rp-a")["rp-a"]
	if s.ID == old["rp-a"] || len(s.Matchers) != 2 || s.Matchers[1].Name != "team" {
		t.Errorf("after the matchers changed: %+v (before: %s)", s, old["rp-a"])
	}
}

// waitAlert polls until the alert with labels is in state.
func waitAlert(t *testing.T, am *prom.Alertmanager, labels map[string]string, state, silencedBy string) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 15*time.Second)
	defer cancel()
	err := cluster.Poll(ctx, "alert "+labels["node"]+labels["instance"]+" "+state, 50*time.Millisecond, nil,
		func(context.Context) (bool, error) {
			st, by, _ := am.AlertStatus(t, labels)
			return st == state && (silencedBy == "" && len(by) == 0 || slices.Contains(by, silencedBy)), nil
		})
	if err != nil {
		st, by, found := am.AlertStatus(t, labels)
		t.Fatalf("%v: the alert %v is %q silenced by %v (found: %t)", err, labels, st, by, found)
	}
}

func testAlertSilenced(t *testing.T, am *prom.Alertmanager) {
	node := "al.a" // a dot: matched literally, not as any character
	alerts := []map[string]string{
		{"alertname": "NodewardTest", "node": node},
		{"alertname": "NodewardTest", "node": node + ":9100"},
		{"alertname": "NodewardTest", "node": "alXa"},
		{"alertname": "NodewardTest", "node": node + "x"},
	}
	for _, a := range alerts {
		am.PostAlert(t, a)
	}
	spec := &v1alpha1.Silences{Alertmanager: am.URL}
	k := silence.NewKeeper(nil, nil)
	id := syncOK(t, k, "alerts", spec, node)[node]
	waitAlert(t, am, alerts[0], "suppressed", id)
	waitAlert(t, am, alerts[1], "suppressed", id)
	waitAlert(t, am, alerts[2], "active", "")
	waitAlert(t, am, alerts[3], "active", "")

	syncOK(t, k, "alerts", spec)
	waitAlert(t, am, alerts[0], "active", "")
}

func testInstanceLabelMatches(t *testing.T, am *prom.Alertmanager) {
	alerts := []map[string]string{
		{"alertname": "NodewardTest", "instance": "in-b:9100"},
		{"alertname": "NodewardTest", "instance": "in-bc:9100"},
	}
	for _, a := range alerts {
		am.PostAlert(t, a)
	}
	spec := &v1alpha1.Silences{Alertmanager: am.URL, NodeLabel: "instance"}
	id := syncOK(t, silence.NewKeeper(nil, nil), "instance", spec, "in-b")["in-b"]
	waitAlert(t, am, alerts[0], "suppressed", id)
	waitAlert(t, am, alerts[1], "active", "")
}
