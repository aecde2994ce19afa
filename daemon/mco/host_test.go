package mco

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"net/url"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/nodeward/nodeward/daemon/update"
	"github.com/nodeward/nodeward/machineconfig"
)

// fakeOS is the rpm-ostree edge as the update machine sees it: one booted
// and at most one staged deployment, finalized or not, and a rollback
// deployment. boot() is the reboot.
type fakeOS struct {
	booted, staged, previous, next string
	finalized                      bool
}

func (o *fakeOS) Booted(context.Context) (string, error) { return o.booted, nil }
func (o *fakeOS) Stage(_ context.Context, target string) error {
	o.staged, o.finalized = target, false
	return nil
}
func (o *fakeOS) Finalize(_ context.Context, target string) error {
	if o.staged != target {
		return fmt.Errorf("finalize %s: staged is %q", target, o.staged)
	}
	o.finalized, o.next = true, target
	return nil
}
func (o *fakeOS) Rollback(context.Context) error {
	o.next = o.previous
	return nil
}
func (o *fakeOS) boot() {
	if o.next != "" && o.next != o.booted {
		o.previous, o.booted = o.booted, o.next
	}
	o.staged, o.next, o.finalized = "", "", false
}

// mapConfigs is a ConfigSource of MachineConfig objects built in the test,
// parsed by the real parser.
type mapConfigs map[string][]byte

func (m mapConfigs) Get(_ context.Context, name string) (*machineconfig.Config, error) {
	data, ok := m[name]
	if !ok {
		return nil, fmt.Errorf("MachineConfig %s not found", name)
	}
	cfg, err := machineconfig.Parse(data)
	if err != nil {
		return nil, fmt.Errorf("%w: %w", update.ErrRefused, err)
	}
	return cfg, nil
}

// renderedConfig is a rendered MachineConfig with one file and one unit.
func renderedConfig(t *testing.T, name, image string, kargs []string, file string, extra map[string]any) []byte {
	t.Helper()
	spec := map[string]any{
		"osImageURL": image, "kernelArguments": kargs,
		"config": map[string]any{
			"ignition": map[string]any{"version": "3.4.0"},
			"storage": map[string]any{"files": []any{map[string]any{
				"path": "/etc/nodeward-demo.conf", "mode": 0o644,
				"contents": map[string]any{"source": "data:," + url.PathEscape(file)}}}},
			"systemd": map[string]any{"units": []any{map[string]any{
				"name": "nodeward-demo.service", "enabled": true,
				"contents": "[Service]\nExecStart=/bin/true " + file + "\n[Install]\nWantedBy=multi-user.target\n"}}},
		},
	}
	for k, v := range extra {
		spec[k] = v
	}
	data, err := json.Marshal(map[string]any{"apiVersion": "machineconfiguration.openshift.io/v1", "kind": "MachineConfig",
		"metadata": map[string]any{"name": name}, "spec": spec})
	if err != nil {
		t.Fatal(err)
	}
	return data
}

// newTestHost is a Host on a temporary root whose OS booted rendered-1's
// image with bootedArgs (rendered-1's kernel arguments, as the OS target
// string spells them).
func newTestHost(t *testing.T, configs mapConfigs, bootedArgs string) (*Host, *fakeOS, string) {
	t.Helper()
	root, state := t.TempDir(), t.TempDir()
	os := &fakeOS{booted: "ostree-unverified-registry:quay.io/openshift/os@sha256:1111" + bootedArgs}
	h := &Host{OS: os, Configs: configs, Log: slog.New(slog.DiscardHandler),
		Files:      machineconfig.Writer{Root: root, StateDir: filepath.Join(state, "machineconfig")},
		RecordPath: filepath.Join(state, "mco-host.json"),
		Current:    func(context.Context) (string, error) { return "rendered-1", nil }}
	return h, os, root
}

func readFile(t *testing.T, root, path string) string {
	t.Helper()
	data, err := os.ReadFile(filepath.Join(root, path))
	if err != nil {
		return "(absent)"
	}
	return string(data)
}

// TestHostAppliesTheWholeConfigAndRollsItBack: the OS target carries the
// new image through the MCD's transport, the new kernel arguments (a quoted
// one kept whole) and the removed one to delete; the files and the unit
// land only at the finalize; a verified boot makes the config current; a
// rollback restores the previous files.
func TestHostAppliesTheWholeConfigAndRollsItBack(t *testing.T) {
	ctx := context.Background()
	configs := mapConfigs{
		"rendered-1": renderedConfig(t, "rendered-1", "quay.io/openshift/os@sha256:1111", []string{"a=1 old"}, "one", nil),
		"rendered-2": renderedConfig(t, "rendered-2", "quay.io/openshift/os@sha256:2222", []string{"a=1", `q="x y"`}, "two", nil),
		"rendered-3": renderedConfig(t, "rendered-3", "quay.io/openshift/os@sha256:3333", []string{"a=1"}, "three", nil),
	}
	h, fos, root := newTestHost(t, configs, " a=1 old")
	if got, err := h.Booted(ctx); err != nil || got != "rendered-1" {
		t.Fatalf("Booted = %q, %v; want the node's currentConfig rendered-1", got, err)
	}
	if err := h.Stage(ctx, "rendered-2"); err != nil {
		t.Fatal(err)
	}
	wantOS := `ostree-unverified-registry:quay.io/openshift/os@sha256:2222 a=1 q="x y" !old`
	if fos.staged != wantOS {
		t.Fatalf("staged %q, want %q", fos.staged, wantOS)
	}
	if got := readFile(t, root, "/etc/nodeward-demo.conf"); got != "(absent)" {
		t.Fatalf("a file was written at staging, before the drain: %q", got)
	}
	if err := h.Finalize(ctx, "rendered-2"); err != nil {
		t.Fatal(err)
	}
	if got := readFile(t, root, "/etc/nodeward-demo.conf"); got != "two" {
		t.Fatalf("file after the finalize: %q, want two", got)
	}
	if _, err := os.Lstat(filepath.Join(root, "etc/systemd/system/multi-user.target.wants/nodeward-demo.service")); err != nil {
		t.Fatalf("unit not enabled: %v", err)
	}
	fos.boot()
	if ok, reason, err := h.VerifyBooted(ctx, "rendered-2"); !ok || err != nil {
		t.Fatalf("VerifyBooted(rendered-2) = %v %q %v", ok, reason, err)
	}
	if got, _ := h.Booted(ctx); got != "rendered-2" {
		t.Fatalf("Booted after the update = %q", got)
	}

	// The next update boots, fails its verification and is rolled back.
	if err := h.Stage(ctx, "rendered-3"); err != nil {
		t.Fatal(err)
	}
	if !strings.Contains(fos.staged, `!q="x y"`) {
		t.Fatalf("staged %q: the removed quoted argument is not deleted", fos.staged)
	}
	if err := h.Finalize(ctx, "rendered-3"); err != nil {
		t.Fatal(err)
	}
	fos.next = "ostree-unverified-registry:quay.io/openshift/os@sha256:bad"
	fos.boot()
	if ok, _, _ := h.VerifyBooted(ctx, "rendered-3"); ok {
		t.Fatal("verified rendered-3 on the wrong OS")
	}
	if err := h.Rollback(ctx); err != nil {
		t.Fatal(err)
	}
	if got := readFile(t, root, "/etc/nodeward-demo.conf"); got != "two" {
		t.Fatalf("file after the rollback: %q, want two", got)
	}
	fos.boot()
	if got, _ := h.Booted(ctx); got != "rendered-2" {
		t.Fatalf("Booted after the rollback = %q, want rendered-2", got)
	}
}

// TestHostRefusesWithNothingWritten: a change nodeward cannot apply, or a
// malformed config, is refused at staging (update.ErrRefused) naming the
// field; nothing is staged or written.
func TestHostRefusesWithNothingWritten(t *testing.T) {
	for name, tc := range map[string]struct {
		extra map[string]any
		file  string
		field string
	}{
		"unsupported change": {extra: map[string]any{"kernelType": "realtime"}, file: "two", field: "kernelType"},
		"malformed config":   {extra: map[string]any{"config": map[string]any{"ignition": map[string]any{"version": "9.9.9"}}}, field: "spec.config.ignition.version"},
	} {
		t.Run(name, func(t *testing.T) {
			ctx := context.Background()
			configs := mapConfigs{
				"rendered-1": renderedConfig(t, "rendered-1", "quay.io/openshift/os@sha256:1111", nil, "one", nil),
				"rendered-2": renderedConfig(t, "rendered-2", "quay.io/openshift/os@sha256:2222", nil, tc.file, tc.extra),
			}
			h, fos, root := newTestHost(t, configs, "")
			err := h.Stage(ctx, "rendered-2")
			if !errors.Is(err, update.ErrRefused) || !strings.Contains(err.Error(), tc.field) {
				t.Fatalf("Stage: %v; want ErrRefused naming %s", err, tc.field)
			}
			if fos.staged != "" || readFile(t, root, "/etc/nodeward-demo.conf") != "(absent)" {
				t.Fatalf("something was staged (%q) or written", fos.staged)
			}
		})
	}
}

func TestTargetCarriesALayeredImage(t *testing.T) {
	for _, tc := range []struct{ config, image string }{{"rendered-1", ""}, {"rendered-1", "quay.io/x/layered@sha256:ab"}} {
		c, i := SplitTarget(Target(tc.config, tc.image))
		if c != tc.config || i != tc.image {
			t.Fatalf("SplitTarget(Target(%q, %q)) = %q, %q", tc.config, tc.image, c, i)
		}
	}
}
