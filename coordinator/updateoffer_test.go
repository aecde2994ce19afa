package coordinator

import (
	"encoding/json"
	"testing"
	"time"

	"github.com/nodeward/nodeward/api/v1alpha1"
)

func TestDialectArchSpellsEachServicesName(t *testing.T) {
	for _, c := range []struct {
		dialect    v1alpha1.UpdateGraphDialect
		arch, want string
	}{
		{v1alpha1.OpenShiftGraph, "", "amd64"},
		{v1alpha1.OpenShiftGraph, "x86_64", "amd64"},
		{v1alpha1.OpenShiftGraph, "aarch64", "arm64"},
		{v1alpha1.OpenShiftGraph, "multi", "multi"},
		{v1alpha1.FedoraCoreOSGraph, "", "x86_64"},
		{v1alpha1.FedoraCoreOSGraph, "amd64", "x86_64"},
		{v1alpha1.FedoraCoreOSGraph, "arm64", "aarch64"},
		{v1alpha1.FedoraCoreOSGraph, "s390x", "s390x"},
	} {
		if got := dialectArch(c.dialect, c.arch); got != c.want {
			t.Errorf("%s %q: %q, want %q", c.dialect, c.arch, got, c.want)
		}
	}
}

func TestPinnedAcceptsDigestsAndChecksumsOnly(t *testing.T) {
	for payload, want := range map[string]bool{
		"quay.io/fedora/fedora-coreos@sha256:61babf9ce9b05095b62cb0c837c1375988b3641f7faa1fb19f2ca9b704a1ec96": true,
		"61babf9ce9b05095b62cb0c837c1375988b3641f7faa1fb19f2ca9b704a1ec96":                                     true,
		"quay.io/fedora/fedora-coreos:stable":                                                                  false,
		"61BABF9CE9B05095B62CB0C837C1375988B3641F7FAA1FB19F2CA9B704A1EC96":                                     false,
		"": false,
	} {
		if got := pinned(payload); got != want {
			t.Errorf("pinned(%q) = %v, want %v", payload, got, want)
		}
	}
}

// A merge patch keeps what it omits: the status patch must null what went.
func TestStatusPatchNullsWhatVanished(t *testing.T) {
	prev := v1alpha1.UpdatePoolStatus{FailedNodes: []string{"a"}, Updates: &v1alpha1.UpdatesStatus{
		Available: []v1alpha1.UpdateRelease{{Version: "1"}}, RolledBack: []string{"x"}}}
	st := v1alpha1.UpdatePoolStatus{Updates: &v1alpha1.UpdatesStatus{RolledBack: []string{"x"}}}
	data, err := statusPatch(st, prev)
	if err != nil {
		t.Fatal(err)
	}
	var got map[string]map[string]any
	if err := json.Unmarshal(data, &got); err != nil {
		t.Fatal(err)
	}
	status := got["status"]
	if v, ok := status["failedNodes"]; !ok || v != nil {
		t.Errorf("failedNodes: %v (present %v), want null", v, ok)
	}
	updates, _ := status["updates"].(map[string]any)
	if v, ok := updates["available"]; !ok || v != nil {
		t.Errorf("updates.available: %v (present %v), want null: %s", v, ok, data)
	}
	if _, ok := updates["rolledBack"]; !ok {
		t.Errorf("updates.rolledBack dropped: %s", data)
	}
	data, _ = statusPatch(v1alpha1.UpdatePoolStatus{}, prev)
	if err := json.Unmarshal(data, &got); err != nil || got["status"]["updates"] != nil {
		t.Errorf("a source removed: %s, want updates null", data)
	}
}

// graphPolicy denies what rolled back or failed on a selected node, and
// what status remembers; wariness defaults to 0.5.
func TestGraphPolicyDeniesRolledBackReleases(t *testing.T) {
	nodes := []nodeView{
		{name: "a", selected: true, state: v1alpha1.StepRolledBack, stateTgt: "img@sha256:2"},
		{name: "b", selected: true, state: v1alpha1.StepDegraded, stateTgt: "img@sha256:3"},
		{name: "c", selected: true, state: v1alpha1.StepDone, stateTgt: "img@sha256:1"},
		{name: "d", selected: false, state: v1alpha1.StepRolledBack, stateTgt: "img@sha256:4"},
	}
	now := time.Unix(1e9, 0)
	p, err := graphPolicy(&v1alpha1.UpdateSource{}, nodes, &v1alpha1.UpdatesStatus{RolledBack: []string{"img@sha256:2", "img@sha256:0"}}, now)
	if err != nil {
		t.Fatal(err)
	}
	want := []string{"img@sha256:0", "img@sha256:2", "img@sha256:3"}
	if len(p.Denied) != len(want) || p.Wariness != 0.5 || !p.Now.Equal(now) {
		t.Fatalf("policy %+v, want denied %v, wariness 0.5", p, want)
	}
	for i := range want {
		if p.Denied[i] != want[i] {
			t.Errorf("denied %v, want %v", p.Denied, want)
		}
	}
}
