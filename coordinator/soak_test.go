package coordinator

import (
	"slices"
	"strings"
	"testing"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/intstr"
	"k8s.io/utils/ptr"

	"github.com/nodeward/nodeward/api/v1alpha1"
)

const target2 = "quay.io/os:2"

// done marks node i as having finished grant g on the target, its grant
// still held (the coordinator has not released it).
func (f fleet) done(i int, g string) {
	f.annotate(i, v1alpha1.AnnotationGrant, g, v1alpha1.AnnotationGrantPool, "p", v1alpha1.AnnotationGrantTarget, target2,
		v1alpha1.AnnotationState, string(v1alpha1.StepDone), v1alpha1.AnnotationStateTarget, target2,
		v1alpha1.AnnotationStateGrant, g)
}

// settled marks node i as updated, its slot given back.
func (f fleet) settled(i int) {
	f.annotate(i, v1alpha1.AnnotationState, string(v1alpha1.StepDone), v1alpha1.AnnotationStateTarget, target2)
}

func planWith(t *testing.T, p *v1alpha1.UpdatePool, f fleet, gates *gateVerdict) *poolPlan {
	t.Helper()
	pl, err := planPool(planInput{pool: p, nodes: f.views(), pending: map[string]bool{}, gates: gates, now: now})
	if err != nil {
		t.Fatal(err)
	}
	return pl
}

var passing, failing = &gateVerdict{passing: true, reason: "GatesPassing"}, &gateVerdict{reason: "AlertFiring", message: "alert Unhealthy firing"}

func withGates(s *v1alpha1.UpdatePoolSpec) {
	s.Gates = &v1alpha1.Gates{Prometheus: "http://127.0.0.1:9090", Alerts: &metav1.LabelSelector{}}
}

// TestZeroSoakIsReleasedByTheAgent: "0s" is no soak, as "" is: the grant
// goes back with the agent's Done report. A soak that does not parse keeps
// the coordinator's release.
func TestZeroSoakIsReleasedByTheAgent(t *testing.T) {
	for soak, byAgent := range map[string]bool{"": true, "0s": true, "0": true, "10m": false, "soon": false} {
		p := pool(intstr.FromInt32(1), func(s *v1alpha1.UpdatePoolSpec) { s.Soak = soak })
		pl, err := planPool(planInput{pool: p, nodes: healthy(3).views(), pending: map[string]bool{}, now: now})
		if err != nil {
			continue // a soak that does not parse may refuse the plan: then nothing is granted at all
		}
		if pl.releaseAtDone != byAgent {
			t.Errorf("soak %q: grant marked for its agent to release = %v, want %v", soak, pl.releaseAtDone, byAgent)
		}
	}
}

func TestSoakKeepsTheSlotAfterDone(t *testing.T) {
	p := pool(intstr.FromInt32(1), func(s *v1alpha1.UpdatePoolSpec) { s.Soak = "10m" })
	f := healthy(3)
	if pl := planWith(t, p, f, nil); pl.releaseAtDone {
		t.Errorf("a grant of a soaking pool is marked for its agent to release; it must soak")
	}
	f.done(0, "g1")
	pl := planWith(t, p, f, nil)
	if got := pl.startSoak["n00"]; !got.Equal(now.Add(10 * time.Minute)) {
		t.Errorf("soak of n00 starts until %v, want %v", got, now.Add(10*time.Minute))
	}
	if len(pl.release) > 0 || len(pl.grant) > 0 {
		t.Errorf("released %v and granted %v while n00 soaks in a pool of maxUnavailable 1", pl.release, pl.grant)
	}
	if pl.hold.reason != waitSoaking {
		t.Errorf("wait reason %q, want %q", pl.hold.reason, waitSoaking)
	}

	f.annotate(0, v1alpha1.AnnotationSoakUntil, now.Add(time.Minute).Format(time.RFC3339))
	if pl := planWith(t, p, f, nil); len(pl.startSoak) > 0 || len(pl.release) > 0 || len(pl.grant) > 0 {
		t.Errorf("mid-soak: started %v, released %v, granted %v; want nothing", pl.startSoak, pl.release, pl.grant)
	}

	f.annotate(0, v1alpha1.AnnotationSoakUntil, now.Add(-time.Second).Format(time.RFC3339))
	pl = planWith(t, p, f, nil)
	if !slices.Equal(pl.release, []string{"n00"}) || len(pl.grant) > 0 || pl.unavailable["n00"] != releasingWhy {
		t.Errorf("soak over: released %v, granted %v, n00 counted %q; want n00 released and counted until the release is seen",
			pl.release, pl.grant, pl.unavailable["n00"])
	}
	f.annotate(0, v1alpha1.AnnotationGrant, "", v1alpha1.AnnotationSoakUntil, "") // the release is seen
	if pl = planWith(t, p, f, nil); !slices.Equal(pl.grant, []string{"n01"}) {
		t.Errorf("soak over and released: granted %v; want n01", pl.grant)
	}
}

func TestYieldedGrantDoesNotSoak(t *testing.T) {
	p := pool(intstr.FromInt32(1), func(s *v1alpha1.UpdatePoolSpec) { s.Soak = "10m" })
	f := healthy(2)
	f.done(0, "g1")
	f.annotate(0, v1alpha1.AnnotationState, string(v1alpha1.StepYielded))
	if pl := planWith(t, p, f, nil); !slices.Equal(pl.release, []string{"n00"}) || len(pl.startSoak) > 0 {
		t.Errorf("yield: released %v, soaks %v; want released at once", pl.release, pl.startSoak)
	}
}

func TestGatesDecideEveryGrant(t *testing.T) {
	p := pool(intstr.FromInt32(2), withGates)
	f := healthy(3)
	pl := planWith(t, p, f, nil)
	if !pl.needGates || len(pl.grant) > 0 {
		t.Fatalf("no verdict: needGates %t, granted %v; want the gates asked first and nothing granted", pl.needGates, pl.grant)
	}
	if pl := planWith(t, p, f, passing); len(pl.grant) != 2 {
		t.Errorf("gates passing: granted %v, want 2 nodes", pl.grant)
	}
	pl = planWith(t, p, f, failing)
	if len(pl.grant) > 0 || pl.hold.reason != waitGatesFailing || !strings.Contains(pl.hold.message, "alert Unhealthy firing") {
		t.Errorf("gates failing: granted %v, wait %q, waiting %q; want nothing granted and the alert named", pl.grant, pl.hold.reason, pl.hold.message)
	}
	// Nothing to grant: the gates are not needed.
	f = healthy(0)
	if pl := planWith(t, p, f, nil); pl.needGates {
		t.Error("an empty pool asked for the gates")
	}
}

func TestGateFailingDuringSoakHalts(t *testing.T) {
	p := pool(intstr.FromInt32(1), withGates, func(s *v1alpha1.UpdatePoolSpec) { s.Soak = "10m" })
	f := healthy(2)
	f.done(0, "g1")
	f.annotate(0, v1alpha1.AnnotationSoakUntil, now.Add(time.Minute).Format(time.RFC3339))
	if pl := planWith(t, p, f, nil); !pl.needGates {
		t.Error("a soaking node did not ask for the gates")
	}
	pl := planWith(t, p, f, failing)
	if pl.gateHalt == "" || !strings.Contains(pl.gateHalt, "n00") || len(pl.release) > 0 || len(pl.grant) > 0 {
		t.Fatalf("gate failed mid-soak: halt %q, released %v, granted %v; want a halt naming n00 and nothing else", pl.gateHalt, pl.release, pl.grant)
	}
	// Once persisted, the pool is halted: the soak ends, nothing granted.
	p.Annotations = map[string]string{v1alpha1.AnnotationHalted: HaltedByGate(p, pl.gateHalt)}
	pl = planWith(t, p, f, passing)
	if pl.halted.reason != haltGateFailed || !slices.Equal(pl.release, []string{"n00"}) || len(pl.grant) > 0 {
		t.Errorf("halted: %+v, released %v, granted %v", pl.halted, pl.release, pl.grant)
	}
	// A halt written for another target means nothing.
	p.Spec.OSImage = "quay.io/os:3"
	if pl := planWith(t, p, f, passing); pl.halted.reason != "" {
		t.Errorf("a halt of the previous target holds the new one: %+v", pl.halted)
	}
}

func TestCanaryGoesFirstOneAtATimeThenBakes(t *testing.T) {
	p := pool(intstr.FromInt32(3), func(s *v1alpha1.UpdatePoolSpec) {
		s.Canary = &v1alpha1.Canary{Nodes: ptr.To(intstr.FromInt32(2)), Bake: "30m"}
	})
	f := healthy(6)
	// Grants are named after the target's config (grantNames.next): that
	// is how a canary done is told from a node that ran the target before.
	g1, g2 := ConfigName(p.Spec)+"-1-1", ConfigName(p.Spec)+"-1-2"
	if pl := planWith(t, p, f, nil); !slices.Equal(pl.grant, []string{"n00"}) || !pl.canary.active || pl.releaseAtDone {
		t.Fatalf("canary start: granted %v (canary %+v, released by its agent %v), want n00 alone, released by the coordinator", pl.grant, pl.canary, pl.releaseAtDone)
	}
	f.done(0, g1)
	pl := planWith(t, p, f, nil)
	if len(pl.startSoak) > 0 || !slices.Equal(pl.release, []string{"n00"}) || len(pl.grant) > 0 {
		t.Fatalf("first canary done: soaks %v, released %v, granted %v; want it released, nothing granted until the release is seen",
			pl.startSoak, pl.release, pl.grant)
	}
	f.annotate(0, v1alpha1.AnnotationGrant, "") // the release is seen
	if pl = planWith(t, p, f, nil); !slices.Equal(pl.grant, []string{"n01"}) {
		t.Fatalf("first canary released: granted %v; want n01 next", pl.grant)
	}
	if pl.releaseAtDone {
		t.Fatalf("the last canary's grant is marked for its agent to release; it must bake")
	}
	f.settled(0)
	f.annotate(0, v1alpha1.AnnotationGrant, "")
	f.done(1, g2)
	pl = planWith(t, p, f, nil)
	if got := pl.startSoak["n01"]; !got.Equal(now.Add(30*time.Minute)) || len(pl.grant) > 0 {
		t.Fatalf("last canary done: bakes until %v, granted %v; want a 30m bake and nothing granted", got, pl.grant)
	}
	f.annotate(1, v1alpha1.AnnotationSoakUntil, now.Add(-time.Second).Format(time.RFC3339))
	pl = planWith(t, p, f, nil)
	if !slices.Equal(pl.release, []string{"n01"}) || len(pl.grant) != 2 || !pl.releaseAtDone || pl.limit != 3 {
		t.Fatalf("bake over: released %v, granted %v (released by their agents %v, limit %d); want n01 released and counted until the release is seen, "+
			"2 more granted at maxUnavailable 3 in the same pass, released by their agents", pl.release, pl.grant, pl.releaseAtDone, pl.limit)
	}
	f.settled(1)
	f.annotate(1, v1alpha1.AnnotationGrant, "")
	if pl := planWith(t, p, f, nil); len(pl.grant) != 3 || pl.canary.active {
		t.Errorf("after the canary: granted %v (canary %+v), want 3 at maxUnavailable", pl.grant, pl.canary)
	}
}

func TestCanaryFailureHaltsUntilAcknowledged(t *testing.T) {
	p := pool(intstr.FromInt32(3), func(s *v1alpha1.UpdatePoolSpec) {
		s.Canary = &v1alpha1.Canary{Nodes: ptr.To(intstr.FromString("20%")), Bake: "1m"}
	})
	f := healthy(6)
	f.done(0, "g1")
	f.annotate(0, v1alpha1.AnnotationState, string(v1alpha1.StepDegraded))
	pl := planWith(t, p, f, nil)
	if pl.halted.reason != haltCanaryFailed || !strings.Contains(pl.halted.message, "n00") || len(pl.grant) > 0 {
		t.Fatalf("failed canary: halted %+v, granted %v; want CanaryFailed naming n00, nothing granted", pl.halted, pl.grant)
	}
	p.Annotations = map[string]string{v1alpha1.AnnotationFailuresAcknowledged: ConfigName(p.Spec) + ":n00"}
	if pl := planWith(t, p, f, nil); pl.halted.reason != "" {
		t.Errorf("acknowledged: still halted %+v", pl.halted)
	}
}

func TestCanarySelectorPicksTheCanaries(t *testing.T) {
	p := pool(intstr.FromInt32(3), func(s *v1alpha1.UpdatePoolSpec) {
		s.Canary = &v1alpha1.Canary{Selector: &metav1.LabelSelector{MatchLabels: map[string]string{"canary": "yes"}}, Bake: "1m"}
	})
	f := healthy(4)
	views := f.views()
	views[2].canary = true
	pl, err := planPool(planInput{pool: p, nodes: views, pending: map[string]bool{}, now: now})
	if err != nil {
		t.Fatal(err)
	}
	if !slices.Equal(pl.grant, []string{"n02"}) {
		t.Errorf("granted %v, want the one canary n02", pl.grant)
	}
}

func TestFailureBudgetPercentage(t *testing.T) {
	p := pool(intstr.FromInt32(3), func(s *v1alpha1.UpdatePoolSpec) { s.FailureBudget = ptr.To(intstr.FromString("25%")) })
	f := healthy(8) // 25% of 8: 2
	f.done(0, "g1")
	f.annotate(0, v1alpha1.AnnotationState, string(v1alpha1.StepDegraded))
	if pl := planWith(t, p, f, nil); pl.halted.reason != "" {
		t.Fatalf("one failure of a budget of 2 halted: %+v", pl.halted)
	}
	f.done(1, "g2")
	f.annotate(1, v1alpha1.AnnotationState, string(v1alpha1.StepDegraded))
	if pl := planWith(t, p, f, nil); pl.halted.reason != haltFailureBudget || len(pl.grant) > 0 {
		t.Errorf("two failures: halted %+v, granted %v; want the budget exhausted", pl.halted, pl.grant)
	}
}

func TestBadGuardrailSpecIsAnError(t *testing.T) {
	for name, mut := range map[string]func(*v1alpha1.UpdatePoolSpec){
		"soak": func(s *v1alpha1.UpdatePoolSpec) { s.Soak = "ten minutes" },
		"bake": func(s *v1alpha1.UpdatePoolSpec) { s.Canary = &v1alpha1.Canary{Bake: "-1m"} },
		"canary": func(s *v1alpha1.UpdatePoolSpec) {
			s.Canary = &v1alpha1.Canary{Nodes: ptr.To(intstr.FromString("0%")), Bake: "1m"}
		},
	} {
		p := pool(intstr.FromInt32(1), mut)
		_, err := planPool(planInput{pool: p, nodes: healthy(2).views(), now: now})
		if err == nil || !strings.Contains(err.Error(), name) {
			t.Errorf("%s: error %v, want one naming the field", name, err)
		}
	}
}

// TestSoakEndIsRoundedUp: soak-until keeps whole seconds, so the end is
// rounded up, never down: a soak never ends early.
func TestSoakEndIsRoundedUp(t *testing.T) {
	at := now.Add(300 * time.Millisecond)
	if got, want := soakEnd(at, time.Minute), now.Add(61*time.Second); !got.Equal(want) {
		t.Errorf("soakEnd(%v, 1m) = %v, want %v", at, got, want)
	}
	if got, want := soakEnd(now, time.Minute), now.Add(time.Minute); !got.Equal(want) {
		t.Errorf("soakEnd(%v, 1m) = %v, want %v", now, got, want)
	}
}
