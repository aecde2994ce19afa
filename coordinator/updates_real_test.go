package coordinator_test

import (
	"context"
	"fmt"
	"net"
	"slices"
	"strings"
	"testing"
	"time"

	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/nodeward/nodeward/api/v1alpha1"
	"github.com/nodeward/nodeward/coordinator"
	"github.com/nodeward/nodeward/test/cluster"
	"github.com/nodeward/nodeward/updategraph"
)

// A Manual pool lists what its source offers, the conditional update with
// its risks and Recommended condition, and changes no target.
func TestUpdateSourceManualListsUpdates(t *testing.T) {
	t.Parallel()
	const prefix = "upmanual"
	cp, dyn := setup(t)
	renewLeases(t, cp, cp.CreateNodes(t, cluster.NodeSpec{Prefix: prefix, Count: 3}))
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	data, payloads := openShiftGraph(t)
	srv := newGraphServer(t, data)
	simulateAgents(ctx, t, cp, prefix, 100*time.Millisecond)
	createPool(t, dyn, prefix, sourcedPool(prefix, payloads["4.17.18"], v1alpha1.UpdateSource{URL: srv.URL + "/graph",
		Dialect: v1alpha1.OpenShiftGraph, Channel: "stable-4.18", Arch: "x86_64"}, 1))
	targets := targetsOf(ctx, t, dyn, prefix)
	risks := &recommendAll{}
	runCoordinator(ctx, t, cp, dyn, prefix, fastFetches, func(o *coordinator.Config) { o.Risks = risks })
	waitUpdated(t, cp, dyn, prefix, 3, time.Minute)
	settledAt := time.Now()
	pool := waitPool(t, dyn, prefix, "updates listed after the rollout", 30*time.Second, func(p *v1alpha1.UpdatePool) error {
		u := p.Status.Updates
		if err := retrieved(metav1.ConditionTrue, "AsExpected")(p); err != nil {
			return err
		}
		if u == nil || u.RetrievedAt == nil || u.RetrievedAt.Time.Before(settledAt.Add(time.Second)) {
			return fmt.Errorf("updates %+v: not retrieved since the pool settled", u)
		}
		return nil
	})
	u := pool.Status.Updates
	if u.Current == nil || u.Current.Version != "4.17.18" || u.Current.Image != payloads["4.17.18"] {
		t.Errorf("current %+v, want 4.17.18", u.Current)
	}
	if len(u.Available) != 1 || u.Available[0].Version != "4.17.20" || u.Available[0].Image != payloads["4.17.20"] {
		t.Errorf("available %+v, want 4.17.20 alone", u.Available)
	}
	if len(u.Conditional) != 1 || u.Conditional[0].Release.Version != "4.17.19" ||
		len(u.Conditional[0].Risks) != 1 || u.Conditional[0].Risks[0].Name != "AROBrokenDNSMasq" {
		t.Fatalf("conditional %+v, want 4.17.19 with the risk AROBrokenDNSMasq", u.Conditional)
	}
	if c := meta.FindStatusCondition(u.Conditional[0].Conditions, v1alpha1.UpdateRecommended); c == nil ||
		c.Status != metav1.ConditionTrue || c.Reason != "NotExposedToRisks" {
		t.Errorf("4.17.19 Recommended %+v, want True NotExposedToRisks from the evaluator", c)
	}
	if got := targets(); len(got) != 1 || pool.Spec.OSImage != payloads["4.17.18"] {
		t.Errorf("a Manual pool's target changed: %v", got)
	}
	if q := *srv.lastQuery.Load(); q.Get("channel") != "stable-4.18" || q.Get("arch") != "amd64" {
		t.Errorf("the graph was asked %v, want channel stable-4.18 and arch amd64", q)
	}
}

// An Automatic pool walks the graph hop by hop, each hop rolled out under
// maxUnavailable, and never takes a conditional update whose risks no one
// evaluated, even when it is the newest.
func TestUpdateSourceAutomaticTakesRecommendedHops(t *testing.T) {
	t.Parallel()
	const prefix = "upauto"
	cp, dyn := setup(t)
	renewLeases(t, cp, cp.CreateNodes(t, cluster.NodeSpec{Prefix: prefix, Count: 4}))
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	data, payloads := openShiftGraph(t)
	srv := newGraphServer(t, data)
	peak := watchInvariant(ctx, t, cp, prefix, 1)
	simulateAgents(ctx, t, cp, prefix, 100*time.Millisecond)
	// From 4.17.19 the newest edge is the conditional 4.18.0 (risk
	// PreRelease): without a risk evaluator it is Recommended Unknown.
	createPool(t, dyn, prefix, sourcedPool(prefix, payloads["4.17.19"], v1alpha1.UpdateSource{URL: srv.URL,
		Dialect: v1alpha1.OpenShiftGraph, Channel: "stable-4.18", Policy: v1alpha1.AutomaticUpdates}, 1))
	targets := targetsOf(ctx, t, dyn, prefix)
	runCoordinator(ctx, t, cp, dyn, prefix, fastFetches)
	waitPool(t, dyn, prefix, "4.18.2 rolled out", 2*time.Minute, func(p *v1alpha1.UpdatePool) error {
		if p.Spec.OSImage != payloads["4.18.2"] || p.Status.UpdatedMachineCount != 4 || p.Status.Updates == nil ||
			p.Status.Updates.Current == nil || p.Status.Updates.Current.Version != "4.18.2" {
			return fmt.Errorf("target %s, %d updated, updates %+v", p.Spec.OSImage, p.Status.UpdatedMachineCount, p.Status.Updates)
		}
		return nil
	})
	want := []string{payloads["4.17.19"], payloads["4.17.20"], payloads["4.18.1"], payloads["4.18.2"]}
	if got := targets(); !slices.Equal(got, want) {
		t.Errorf("targets %v, want 4.17.19 → 4.17.20 → 4.18.1 → 4.18.2 %v", got, want)
	}
	if peak.Load() < 1 {
		t.Errorf("no node was ever seen updating")
	}
}

// fcosGraph builds the Fedora CoreOS stable graph from the snapshot, with
// the OCI images as payloads.
func fcosGraph(t *testing.T) *updategraph.Graph {
	t.Helper()
	index, err := updategraph.ParseReleaseIndex(readTestdata(t, "fcos/releases/stable.json"))
	if err != nil {
		t.Fatal(err)
	}
	updates, err := updategraph.ParseUpdates(readTestdata(t, "fcos/updates/stable.json"))
	if err != nil {
		t.Fatal(err)
	}
	g, err := updategraph.BuildFCOS(index, updates, updategraph.Scope{Arch: "x86_64", OCI: true})
	if err != nil {
		t.Fatal(err)
	}
	return g
}

// An Automatic pool on the Fedora CoreOS stream stops at the barrier, then
// goes on to the newest release.
func TestUpdateSourceAutomaticStopsAtFCOSBarrier(t *testing.T) {
	t.Parallel()
	const prefix = "upfcos"
	cp, dyn := setup(t)
	renewLeases(t, cp, cp.CreateNodes(t, cluster.NodeSpec{Prefix: prefix, Count: 2}))
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	g := fcosGraph(t)
	barrier := -1 // the last barrier
	for i, r := range g.Releases {
		if r.Barrier {
			barrier = i
		}
	}
	if barrier < 2 {
		t.Fatalf("the snapshot's stable graph has no barrier after its third release")
	}
	start, newest := g.Releases[barrier-2], g.Releases[len(g.Releases)-1]
	data, err := g.MarshalJSON()
	if err != nil {
		t.Fatal(err)
	}
	srv := newGraphServer(t, data)
	watchInvariant(ctx, t, cp, prefix, 1)
	simulateAgents(ctx, t, cp, prefix, 100*time.Millisecond)
	createPool(t, dyn, prefix, sourcedPool(prefix, start.Payload, v1alpha1.UpdateSource{URL: srv.URL + "/v1/graph",
		Dialect: v1alpha1.FedoraCoreOSGraph, Channel: "stable", Policy: v1alpha1.AutomaticUpdates, Wariness: "0.9"}, 1))
	targets := targetsOf(ctx, t, dyn, prefix)
	runCoordinator(ctx, t, cp, dyn, prefix, fastFetches)
	waitPool(t, dyn, prefix, newest.Version+" rolled out", 2*time.Minute, func(p *v1alpha1.UpdatePool) error {
		if p.Spec.OSImage != newest.Payload || p.Status.UpdatedMachineCount != 2 {
			return fmt.Errorf("target %s, %d updated", p.Spec.OSImage, p.Status.UpdatedMachineCount)
		}
		return retrieved(metav1.ConditionTrue, "AsExpected")(p)
	})
	want := []string{start.Payload, g.Releases[barrier].Payload, newest.Payload}
	if got := targets(); !slices.Equal(got, want) {
		t.Errorf("targets %v, want %s → the barrier %s → %s", got, start.Version, g.Releases[barrier].Version, newest.Version)
	}
	if q := *srv.lastQuery.Load(); q.Get("stream") != "stable" || q.Get("basearch") != "x86_64" {
		t.Errorf("the graph was asked %v, want stream stable and basearch x86_64", q)
	}
}

// A graph server that serves garbage, fails, is slow or is down changes no
// target: the pool says why and keeps its last good list.
func TestUpdateSourceFailuresChangeNothing(t *testing.T) {
	t.Parallel()
	const prefix = "upfail"
	cp, dyn := setup(t)
	renewLeases(t, cp, cp.CreateNodes(t, cluster.NodeSpec{Prefix: prefix, Count: 1}))
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	data, payloads := openShiftGraph(t)
	srv := newGraphServer(t, data)
	simulateAgents(ctx, t, cp, prefix, 50*time.Millisecond)
	createPool(t, dyn, prefix, sourcedPool(prefix, payloads["4.17.18"], v1alpha1.UpdateSource{URL: srv.URL,
		Dialect: v1alpha1.OpenShiftGraph, Channel: "stable-4.18"}, 1))
	down := closedURL(t)
	createPool(t, dyn, prefix, sourcedPool(prefix+"-down", payloads["4.17.17"], v1alpha1.UpdateSource{URL: down,
		Dialect: v1alpha1.OpenShiftGraph, Channel: "stable-4.18", Policy: v1alpha1.AutomaticUpdates}, 1))
	targets := targetsOf(ctx, t, dyn, prefix)
	runCoordinator(ctx, t, cp, dyn, prefix, fastFetches)
	good := waitPool(t, dyn, prefix, "a first list", time.Minute, retrieved(metav1.ConditionTrue, "AsExpected")).Status.Updates
	for _, step := range []struct{ mode, reason, says string }{
		{"garbage", updategraph.ReasonResponseInvalid, "invalid JSON"},
		{"error", updategraph.ReasonResponseFailed, "upstream_unreachable"},
		{"slow", updategraph.ReasonRemoteFailed, "timed out"},
	} {
		srv.mode.Store(step.mode)
		pool := waitPool(t, dyn, prefix, "served "+step.mode, 30*time.Second, retrieved(metav1.ConditionFalse, step.reason))
		c := meta.FindStatusCondition(pool.Status.Conditions, v1alpha1.PoolRetrievedUpdates)
		if !strings.Contains(c.Message, step.says) || !strings.Contains(c.Message, "no target changes") {
			t.Errorf("%s: RetrievedUpdates says %q, want it to name %q and that no target changes", step.mode, c.Message, step.says)
		}
		if u := pool.Status.Updates; u == nil || u.RetrievedAt == nil || u.Current == nil || u.Current.Version != good.Current.Version ||
			len(u.Available) != len(good.Available) || len(u.Conditional) != len(good.Conditional) {
			t.Errorf("%s: updates %+v, want the last good list %+v kept", step.mode, u, good)
		}
	}
	pool := waitPool(t, dyn, prefix+"-down", "the service down", time.Minute, retrieved(metav1.ConditionFalse, updategraph.ReasonRemoteFailed))
	if pool.Spec.OSImage != payloads["4.17.17"] || pool.Status.Updates != nil {
		t.Errorf("a pool whose source is down: target %s, updates %+v; want 4.17.17 and none", pool.Spec.OSImage, pool.Status.Updates)
	}
	if got := targets(); len(got) != 1 {
		t.Errorf("targets %v: the failures changed the target", got)
	}
}

// closedURL is the URL of a port nothing listens on any more.
func closedURL(t *testing.T) string {
	t.Helper()
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	addr := l.Addr().String()
	_ = l.Close()
	return "http://" + addr + "/graph"
}

// A release that rolled back on a node of the pool is never offered
// again, and Automatic does not take it, even once the node is back on the
// pool's release.
func TestUpdateSourceNeverOffersARolledBackRelease(t *testing.T) {
	t.Parallel()
	const prefix = "uprollback"
	cp, dyn := setup(t)
	nodes := cp.CreateNodes(t, cluster.NodeSpec{Prefix: prefix, Count: 2})
	renewLeases(t, cp, nodes)
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	data, payloads := openShiftGraph(t)
	srv := newGraphServer(t, data)
	simulateAgents(ctx, t, cp, prefix, 50*time.Millisecond)
	createPool(t, dyn, prefix, sourcedPool(prefix, payloads["4.17.19"], v1alpha1.UpdateSource{URL: srv.URL,
		Dialect: v1alpha1.OpenShiftGraph, Channel: "stable-4.18"}, 1))
	targets := targetsOf(ctx, t, dyn, prefix)
	runCoordinator(ctx, t, cp, dyn, prefix, fastFetches)
	waitUpdated(t, cp, dyn, prefix, 2, time.Minute)
	waitPool(t, dyn, prefix, "4.17.20 offered", 30*time.Second, func(p *v1alpha1.UpdatePool) error {
		if u := p.Status.Updates; u == nil || len(u.Available) != 1 || u.Available[0].Version != "4.17.20" {
			return fmt.Errorf("updates %+v", u)
		}
		return nil
	})
	// Paused, so that the node stays rolled back until the status shows it.
	patchPool(ctx, t, dyn, prefix, map[string]any{"paused": true})
	rolledBack := map[string]any{v1alpha1.AnnotationState: v1alpha1.StepRolledBack, v1alpha1.AnnotationStateTarget: payloads["4.17.20"]}
	if err := patchAnnotations(ctx, cp, nodes[0], rolledBack); err != nil {
		t.Fatal(err)
	}
	waitPool(t, dyn, prefix, "4.17.20 denied", 30*time.Second, deniedOnly(payloads["4.17.20"]))
	done := map[string]any{v1alpha1.AnnotationState: v1alpha1.StepDone, v1alpha1.AnnotationStateTarget: payloads["4.17.19"]}
	if err := patchAnnotations(ctx, cp, nodes[0], done); err != nil {
		t.Fatal(err)
	}
	patchPool(ctx, t, dyn, prefix, map[string]any{"paused": false,
		"updateSource": map[string]any{"policy": string(v1alpha1.AutomaticUpdates)}})
	since := time.Now()
	pool := waitPool(t, dyn, prefix, "settled, Automatic, retrieved again", 30*time.Second, func(p *v1alpha1.UpdatePool) error {
		if u := p.Status.Updates; p.Spec.Paused || p.Status.UpdatedMachineCount != 2 || u == nil || u.RetrievedAt.Time.Before(since.Add(time.Second)) {
			return fmt.Errorf("paused %v, %d updated, updates %+v", p.Spec.Paused, p.Status.UpdatedMachineCount, u)
		}
		return deniedOnly(payloads["4.17.20"])(p)
	})
	if got := targets(); len(got) != 1 || pool.Spec.OSImage != payloads["4.17.19"] {
		t.Errorf("targets %v: Automatic moved the pool to a release that rolled back", got)
	}
}

// deniedOnly checks that the pool's updates list denied as rolled back and
// offer nothing unconditional (from 4.17.19, 4.17.20 is the only edge).
func deniedOnly(denied string) func(*v1alpha1.UpdatePool) error {
	return func(p *v1alpha1.UpdatePool) error {
		u := p.Status.Updates
		if u == nil || !slices.Equal(u.RolledBack, []string{denied}) || len(u.Available) != 0 {
			return fmt.Errorf("updates %+v, want %s rolled back and nothing available", u, denied)
		}
		c := meta.FindStatusCondition(p.Status.Conditions, v1alpha1.PoolRetrievedUpdates)
		if c == nil || !strings.Contains(c.Message, "rolled back on a node of the pool") {
			return fmt.Errorf("RetrievedUpdates %+v does not say why 4.17.20 is not offered", c)
		}
		return nil
	}
}
