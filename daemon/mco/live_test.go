package mco

import (
	"context"
	"encoding/json"
	"errors"
	"net/url"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	"github.com/nodeward/nodeward/disruption"
)

// filesConfig is a rendered MachineConfig on image with files (path →
// contents).
func filesConfig(t *testing.T, name, image string, files map[string]string) []byte {
	t.Helper()
	var list []any
	for _, p := range slices.Sorted(func(yield func(string) bool) {
		for p := range files {
			if !yield(p) {
				return
			}
		}
	}) {
		list = append(list, map[string]any{"path": p, "mode": 0o644,
			"contents": map[string]any{"source": "data:," + url.PathEscape(files[p])}})
	}
	data, err := json.Marshal(map[string]any{"apiVersion": "machineconfiguration.openshift.io/v1", "kind": "MachineConfig",
		"metadata": map[string]any{"name": name}, "spec": map[string]any{"osImageURL": image,
			"config": map[string]any{"ignition": map[string]any{"version": "3.4.0"}, "storage": map[string]any{"files": list}}}})
	if err != nil {
		t.Fatal(err)
	}
	return data
}

type fixedPolicies struct {
	p   disruption.Policies
	err error
}

func (f fixedPolicies) Get(context.Context) (disruption.Policies, error) { return f.p, f.err }

// recordedUnits records the unit actions; a unit in fail fails.
type recordedUnits struct {
	calls []string
	fail  map[string]bool
}

func (u *recordedUnits) do(call, unit string) error {
	u.calls = append(u.calls, call+" "+unit)
	if u.fail[unit] {
		return errors.New(`its job finished with result "failed", not "done"`)
	}
	return nil
}
func (u *recordedUnits) Reload(_ context.Context, unit string) error  { return u.do("reload", unit) }
func (u *recordedUnits) Restart(_ context.Context, unit string) error { return u.do("restart", unit) }
func (u *recordedUnits) DaemonReload(context.Context) error           { return u.do("daemon-reload", "") }

const image1 = "quay.io/openshift/os@sha256:1111"

var baseFiles = map[string]string{
	"/var/lib/kubelet/config.json": `{"auths":{}}`,
	"/etc/containers/policy.json":  `{"default":[{"type":"insecureAcceptAnything"}]}`,
}

func with(path, data string) map[string]string {
	out := map[string]string{}
	for k, v := range baseFiles {
		out[k] = v
	}
	out[path] = data
	return out
}

// liveHost is a Host with the daemon's default policies, moving from
// rendered-1 (baseFiles on image1) to rendered-2.
func liveHost(t *testing.T, image string, files map[string]string) (*Host, *recordedUnits, *[]string) {
	t.Helper()
	configs := mapConfigs{
		"rendered-1": filesConfig(t, "rendered-1", image1, baseFiles),
		"rendered-2": filesConfig(t, "rendered-2", image, files),
	}
	h, _, _ := newTestHost(t, configs, "")
	units := &recordedUnits{fail: map[string]bool{}}
	var events []string
	h.Policies, h.Units = fixedPolicies{p: disruption.DefaultPolicies()}, units
	h.Events = func(_ context.Context, warning bool, reason, message string) {
		events = append(events, reason+": "+message)
	}
	return h, units, &events
}

func TestHostDisruptionFollowsThePolicies(t *testing.T) {
	for name, tc := range map[string]struct {
		image            string
		files            map[string]string
		force            bool
		noDrain, noReboo bool
	}{
		"pull secret": {image: image1, files: with("/var/lib/kubelet/config.json", `{"auths":{"a":{}}}`), noDrain: true, noReboo: true},
		"policy.json": {image: image1, files: with("/etc/containers/policy.json", `{"default":[{"type":"reject"}]}`), noDrain: true, noReboo: true},
		"no policy":   {image: image1, files: with("/etc/nodeward-demo.conf", "x")},
		"OS image":    {image: "quay.io/openshift/os@sha256:2222", files: with("/var/lib/kubelet/config.json", `{"auths":{"a":{}}}`)},
		"force file":  {image: image1, files: with("/var/lib/kubelet/config.json", `{"auths":{"a":{}}}`), force: true},
	} {
		t.Run(name, func(t *testing.T) {
			ctx := context.Background()
			h, _, _ := liveHost(t, tc.image, tc.files)
			force := filepath.Join(h.Files.Root, ForceFile)
			if tc.force {
				if err := os.MkdirAll(filepath.Dir(force), 0o755); err != nil {
					t.Fatal(err)
				}
				if err := os.WriteFile(force, nil, 0o644); err != nil {
					t.Fatal(err)
				}
			}
			if err := h.Stage(ctx, "rendered-2"); err != nil {
				t.Fatal(err)
			}
			d, err := h.Disruption(ctx, "rendered-2")
			if err != nil {
				t.Fatal(err)
			}
			if d.NoDrain != tc.noDrain || d.NoReboot != tc.noReboo || d.Reason == "" {
				t.Fatalf("Disruption = %+v; want noDrain %v noReboot %v with a reason", d, tc.noDrain, tc.noReboo)
			}
			if _, err := os.Stat(force); tc.force && !errors.Is(err, os.ErrNotExist) {
				t.Fatalf("the force file was not consumed: %v", err)
			}
		})
	}
}

func TestHostDisruptionWaitsForThePolicies(t *testing.T) {
	ctx := context.Background()
	h, _, _ := liveHost(t, image1, with("/var/lib/kubelet/config.json", `{"auths":{"a":{}}}`))
	h.Policies = fixedPolicies{err: ErrPoliciesNotReady}
	if err := h.Stage(ctx, "rendered-2"); err != nil {
		t.Fatal(err)
	}
	if _, err := h.Disruption(ctx, "rendered-2"); !errors.Is(err, ErrPoliciesNotReady) {
		t.Fatalf("Disruption without policies: %v; want ErrPoliciesNotReady", err)
	}
}

// TestHostAppliesInPlace: the files land, CRI-O is reloaded once with the
// daemon's Event, the config verifies and becomes current; a reload that
// fails is the daemon's message and Event.
func TestHostAppliesInPlace(t *testing.T) {
	ctx := context.Background()
	policy := `{"default":[{"type":"reject"}]}`
	h, units, events := liveHost(t, image1, with("/etc/containers/policy.json", policy))
	if err := h.Stage(ctx, "rendered-2"); err != nil {
		t.Fatal(err)
	}
	if _, err := h.Disruption(ctx, "rendered-2"); err != nil {
		t.Fatal(err)
	}
	units.fail["crio.service"] = true
	err := h.ApplyLive(ctx, "rendered-2")
	if err == nil || !strings.Contains(err.Error(), "could not apply update: reloading crio.service configuration failed. Error:") {
		t.Fatalf("ApplyLive with a failing reload: %v; want the daemon's message", err)
	}
	if n := len(*events); n == 0 || !strings.HasPrefix((*events)[n-1], "FailedServiceReload: Reloading service crio.service failed.") {
		t.Fatalf("events %q; want FailedServiceReload", *events)
	}
	units.fail["crio.service"] = false
	if err := h.ApplyLive(ctx, "rendered-2"); err != nil {
		t.Fatal(err)
	}
	if got := readFile(t, h.Files.Root, "/etc/containers/policy.json"); got != policy {
		t.Fatalf("policy.json = %q", got)
	}
	if !slices.Equal(units.calls, []string{"reload crio.service", "reload crio.service"}) {
		t.Fatalf("unit calls %q; want crio.service reloaded once per application", units.calls)
	}
	if last := (*events)[len(*events)-1]; last != "ServiceReload: Config changes do not require reboot. Service crio.service was reloaded." {
		t.Fatalf("last event %q", last)
	}
	if ok, why, err := h.VerifyBooted(ctx, "rendered-2"); !ok || err != nil {
		t.Fatalf("VerifyBooted = %v %q %v", ok, why, err)
	}
	if got, _ := h.Booted(ctx); got != "rendered-2" {
		t.Fatalf("Booted = %q; want rendered-2", got)
	}
}

func TestBootstrapReadsTheFirstBootFile(t *testing.T) {
	root := t.TempDir()
	b := Bootstrap{Root: root}
	write := func(data string) {
		t.Helper()
		p := filepath.Join(root, NodeAnnotationsFile)
		if err := os.MkdirAll(filepath.Dir(p), 0o755); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(p, []byte(data), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	if _, err := b.Annotations(); err == nil || !strings.Contains(err.Error(), NodeAnnotationsFile) {
		t.Fatalf("without the file: %v; want an error naming it", err)
	}
	for data, want := range map[string]string{
		`{"machineconfiguration.openshift.io/currentConfig": `:                   "failed to unmarshal",
		`{"machineconfiguration.openshift.io/desiredConfig": "rendered-1"}`:      "no machineconfiguration.openshift.io/currentConfig",
		`{"machineconfiguration.openshift.io/currentConfig": "r", "other": "x"}`: `"other" is not a machine config annotation`,
	} {
		write(data)
		if _, err := b.Annotations(); err == nil || !strings.Contains(err.Error(), want) {
			t.Fatalf("file %s: %v; want an error saying %q", data, err, want)
		}
	}
	write(`{"machineconfiguration.openshift.io/currentConfig": "rendered-1", "machineconfiguration.openshift.io/desiredConfig": "rendered-1",
		"machineconfiguration.openshift.io/state": "Done"}`)
	got, err := b.Annotations()
	if err != nil || got[AnnotationCurrentConfig] != "rendered-1" || got[AnnotationDesiredConfig] != "rendered-1" || got[AnnotationState] != "" {
		t.Fatalf("Annotations = %v, %v; want current and desired, no state", got, err)
	}
	if active, err := b.Active(); !active || err != nil {
		t.Fatalf("Active = %v, %v", active, err)
	}
	if err := b.Finish(); err != nil {
		t.Fatal(err)
	}
	if active, _ := b.Active(); active {
		t.Fatal("still bootstrapping after Finish")
	}
	if _, err := os.Stat(filepath.Join(root, NodeAnnotationsDoneFile)); err != nil {
		t.Fatalf("the file was not kept as %s: %v", NodeAnnotationsDoneFile, err)
	}
}
