package coordinator

import (
	"errors"
	"fmt"
	"testing"

	"github.com/nodeward/nodeward/api/v1alpha1"
)

func TestCoordinatorKeysAlwaysCarryTheWholeDrainPolicy(t *testing.T) {
	for _, tc := range []struct {
		drain *v1alpha1.DrainSpec
		want  string
	}{
		{nil, "timeout=<nil> yield=<nil> force=<nil>"},
		{&v1alpha1.DrainSpec{Timeout: "5m", OnTimeout: "Force"}, "timeout=5m yield=<nil> force=true"},
		{&v1alpha1.DrainSpec{OnTimeout: "Yield"}, "timeout=<nil> yield=true force=<nil>"},
		{&v1alpha1.DrainSpec{Timeout: "1m", OnTimeout: "Retry"}, "timeout=1m yield=<nil> force=<nil>"},
	} {
		p := &v1alpha1.UpdatePool{Spec: v1alpha1.UpdatePoolSpec{Drain: tc.drain}}
		keys := coordinatorKeys(p, "os:1")
		str := func(k string) string {
			v, ok := keys[k]
			if !ok {
				return "MISSING"
			}
			if v == nil {
				return "<nil>"
			}
			return *v
		}
		got := fmt.Sprintf("timeout=%s yield=%s force=%s", str(v1alpha1.AnnotationDrainTimeout),
			str(v1alpha1.AnnotationYieldOnDrainTimeout), str(v1alpha1.AnnotationForceOnDrainTimeout))
		if got != tc.want || str(v1alpha1.AnnotationTarget) != "os:1" {
			t.Errorf("drain %+v: %s target %s; want %s (every key present, unset ones null)", tc.drain, got, str(v1alpha1.AnnotationTarget), tc.want)
		}
	}
}

func TestOnlyStale(t *testing.T) {
	stale := fmt.Errorf("grant g: %w", fmt.Errorf("patch: %w", staleError{errors.New("409")}))
	other := errors.New("500")
	for _, tc := range []struct {
		err  error
		want bool
	}{
		{stale, true},
		{errors.Join(stale, stale), true},
		{errors.Join(stale, other), false},
		{errors.Join(errors.Join(stale), fmt.Errorf("x: %w", stale)), true},
		{other, false},
	} {
		if got := onlyStale(tc.err); got != tc.want {
			t.Errorf("onlyStale(%v) = %v, want %v", tc.err, got, tc.want)
		}
	}
}

// TestGrantSaysWhoReleasesIt: a grant is marked release-at-done exactly
// when its node keeps no slot after Done, and every release write removes
// the mark with the grant.
func TestGrantSaysWhoReleasesIt(t *testing.T) {
	p := &v1alpha1.UpdatePool{Spec: v1alpha1.UpdatePoolSpec{}}
	for _, byAgent := range []bool{true, false} {
		set := grantAnnotations(p, "os:1", "g1", byAgent, nil)
		v, ok := set[v1alpha1.AnnotationReleaseAtDone]
		switch {
		case !ok:
			t.Errorf("byAgent=%v: the grant leaves release-at-done as it was", byAgent)
		case byAgent && (v == nil || *v != "true"):
			t.Errorf("byAgent=true: release-at-done = %v, want \"true\"", v)
		case !byAgent && v != nil:
			t.Errorf("byAgent=false: release-at-done = %q, want it removed", *v)
		}
	}
	release := releaseAnnotations(false, now)
	for _, k := range v1alpha1.ReleaseKeys() {
		if v, ok := release[k]; !ok || v != nil {
			t.Errorf("the release write leaves %s", k)
		}
	}
}
