package mco

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io/fs"
	"log/slog"
	"os"
	"strings"

	"github.com/nodeward/nodeward/atomicfile"
	"github.com/nodeward/nodeward/daemon/update"
	"github.com/nodeward/nodeward/disruption"
	"github.com/nodeward/nodeward/machineconfig"
	"github.com/nodeward/nodeward/osupdate"
)

// Host applies a whole rendered MachineConfig, as the update machine's OS
// edge in MCO mode: the OS image and the kernel arguments through the OS
// updater (rpm-ostree, staged with finalization locked), the files, units
// and the core user's SSH keys through machineconfig.Writer, written after
// the drain, right before the deployment is finalized. A config it cannot
// apply is refused at staging (update.ErrRefused) with nothing written.
//
// The machine's target is a config name (Target). Host records on disk
// which config the host runs and which one it is moving to, so that
// Booted answers with a config name only when the booted OS and the files
// on disk are that config's: the node never claims a config it does not
// run.
type Host struct {
	OS      update.OSUpdater
	Files   machineconfig.Writer
	Configs ConfigSource
	// RecordPath is Host's record of the current and pending configs.
	RecordPath string
	// Current is the config the node says it runs (currentConfig), for a
	// host Host has no record of yet: provisioned by the MCO or taken
	// over from the machine-config-daemon.
	Current func(ctx context.Context) (string, error)
	// Policies gives the cluster's node disruption policies; nil drains
	// and reboots for every change.
	Policies interface {
		Get(ctx context.Context) (disruption.Policies, error)
	}
	// Units runs the policies' unit actions.
	Units UnitActions
	// Events records an Event about the node (the daemon's SkipReboot,
	// ServiceReload, …); nil records none.
	Events func(ctx context.Context, warning bool, reason, message string)
	Log    *slog.Logger
}

// ConfigSource gives parsed rendered MachineConfigs by name (Configs from
// the API server).
type ConfigSource interface {
	Get(ctx context.Context, name string) (*machineconfig.Config, error)
}

// hostRecord is what Host keeps on disk.
type hostRecord struct {
	// Current is the target the host runs, CurrentOS its OS target.
	Current   string `json:"current"`
	CurrentOS string `json:"currentOS,omitempty"`
	// Pending is the target being applied, PendingOS its OS target.
	Pending   string `json:"pending,omitempty"`
	PendingOS string `json:"pendingOS,omitempty"`
	// PendingActions are the node disruption actions of the move to
	// Pending, decided once (Disruption).
	PendingActions []disruption.Action `json:"pendingActions,omitempty"`
}

// Booted implements update.OSUpdater: the target whose OS booted and whose
// files are on disk, or the OS updater's own answer when neither is.
func (h *Host) Booted(ctx context.Context) (string, error) {
	rec, err := h.record(ctx)
	if err != nil {
		return "", err
	}
	if rec.Pending != "" {
		if ok, _, err := h.runs(ctx, rec.Pending, rec.PendingOS, true); err != nil || ok {
			return rec.Pending, err
		}
	}
	currentOS, err := h.currentOS(ctx, rec)
	if err != nil {
		return "", err
	}
	if ok, _, err := h.runs(ctx, rec.Current, currentOS, false); err != nil || ok {
		return rec.Current, err
	}
	return h.OS.Booted(ctx)
}

// currentOS is the OS target of the config the host runs: recorded when
// nodeward applied it, else derived from the config (its image and kernel
// arguments), so that a host booted into anything else is never taken for
// it.
func (h *Host) currentOS(ctx context.Context, rec hostRecord) (string, error) {
	if rec.CurrentOS != "" {
		return rec.CurrentOS, nil
	}
	cfg, err := h.config(ctx, rec.Current)
	if err != nil {
		return "", fmt.Errorf("read the config the host runs: %w", err)
	}
	_, image := SplitTarget(rec.Current)
	return osTarget(cfg, cfg, image), nil
}

// runs tells whether target runs: its OS booted and, with files, its
// files on disk.
func (h *Host) runs(ctx context.Context, target, osTarget string, files bool) (bool, string, error) {
	if osTarget != "" {
		ok, reason, err := h.verifyOS(ctx, osTarget)
		if err != nil || !ok {
			return false, reason, err
		}
	}
	if !files {
		return true, "", nil
	}
	cfg, err := h.config(ctx, target)
	if err != nil {
		return false, "", err
	}
	applied, err := h.Files.Applied(cfg)
	if err != nil {
		return false, "", fmt.Errorf("check the files of %s: %w", target, err)
	}
	if !applied {
		return false, fmt.Sprintf("the files, units or SSH keys of %s are not on disk", target), nil
	}
	return true, "", nil
}

func (h *Host) verifyOS(ctx context.Context, osTarget string) (bool, string, error) {
	if v, ok := h.OS.(update.OSVerifier); ok {
		return v.VerifyBooted(ctx, osTarget)
	}
	booted, err := h.OS.Booted(ctx)
	if err != nil {
		return false, "", err
	}
	return booted == osTarget, fmt.Sprintf("booted %s, not %s", booted, osTarget), nil
}

// Stage implements update.OSUpdater: it checks that the host can move from
// its config to target's (refusing with update.ErrRefused, nothing
// written, when it cannot), records the move, and stages the OS.
func (h *Host) Stage(ctx context.Context, target string) error {
	rec, current, desired, err := h.move(ctx, target)
	if err != nil {
		return err
	}
	if _, err := machineconfig.Reconcile(current, desired); err != nil {
		var refused *machineconfig.UnreconcilableError
		if errors.As(err, &refused) {
			return fmt.Errorf("%w: can't reconcile config %s with %s: %w", update.ErrRefused, rec.Current, target, err)
		}
		return fmt.Errorf("compare config %s with %s: %w", rec.Current, target, err)
	}
	_, image := SplitTarget(target)
	rec.Pending, rec.PendingOS, rec.PendingActions = target, osTarget(current, desired, image), nil
	if err := h.save(rec); err != nil {
		return err
	}
	return h.OS.Stage(ctx, rec.PendingOS)
}

// move reads Host's record and the configs of the move from the current
// config to target's.
func (h *Host) move(ctx context.Context, target string) (rec hostRecord, current, desired *machineconfig.Config, err error) {
	if rec, err = h.record(ctx); err != nil {
		return rec, nil, nil, err
	}
	if desired, err = h.config(ctx, target); err != nil {
		return rec, nil, nil, err
	}
	if current, err = h.config(ctx, rec.Current); err != nil {
		return rec, nil, nil, fmt.Errorf("read the config the host runs: %w", err)
	}
	return rec, current, desired, nil
}

// osTarget is the OS updater's target for desired: its image (or a layered
// pool's image) through the transport the MCD uses, its kernel arguments,
// and the current config's arguments it no longer has as ones to delete.
func osTarget(current, desired *machineconfig.Config, image string) string {
	if image == "" {
		image = desired.OSImageURL
	}
	if !strings.HasPrefix(image, "ostree-") {
		// The MCD pulls unverified: the MCO's default policy.json has no
		// signature policy for the release image.
		image = osupdate.TransportUnverifiedRegistry + image
	}
	fields := []string{image}
	want := map[string]bool{}
	for _, a := range desired.KernelArgs {
		want[a] = true
		fields = append(fields, a)
	}
	for _, a := range current.KernelArgs {
		if !want[a] {
			fields = append(fields, "!"+a)
		}
	}
	return strings.Join(fields, " ")
}

// Finalize implements update.OSUpdater: the files, units and SSH keys,
// then the staged deployment.
func (h *Host) Finalize(ctx context.Context, target string) error {
	rec, current, desired, err := h.move(ctx, target)
	if err != nil {
		return err
	}
	if rec.Pending != target {
		return fmt.Errorf("finalize %s: the host is moving to %q, not to it", target, rec.Pending)
	}
	if err := h.Files.Apply(ctx, current, desired); err != nil {
		return fmt.Errorf("write the files, units and SSH keys of %s: %w", target, err)
	}
	return h.OS.Finalize(ctx, rec.PendingOS)
}

// Rollback implements update.OSUpdater: the previous files back, then the
// previous deployment as the next boot's.
func (h *Host) Rollback(ctx context.Context) error {
	if err := h.Files.Restore(ctx); err != nil {
		return fmt.Errorf("restore the previous files: %w", err)
	}
	return h.OS.Rollback(ctx)
}

// VerifyBooted implements update.OSVerifier. A verified pending target
// becomes the current one and its file backup is dropped.
func (h *Host) VerifyBooted(ctx context.Context, target string) (bool, string, error) {
	rec, err := h.record(ctx)
	if err != nil {
		return false, "", err
	}
	switch target {
	case rec.Pending:
		ok, reason, err := h.runs(ctx, rec.Pending, rec.PendingOS, true)
		if err != nil || !ok {
			return false, reason, err
		}
		rec.Current, rec.CurrentOS, rec.Pending, rec.PendingOS, rec.PendingActions = rec.Pending, rec.PendingOS, "", "", nil
		if err := h.save(rec); err != nil {
			return false, "", err
		}
		if err := h.Files.Commit(); err != nil {
			h.Log.Warn("cannot drop the backup of the previous files", "err", err)
		}
		return true, "", nil
	case rec.Current:
		currentOS, err := h.currentOS(ctx, rec)
		if err != nil {
			return false, "", err
		}
		return h.runs(ctx, rec.Current, currentOS, false)
	}
	return false, fmt.Sprintf("no update to %s was staged (the host runs %s)", target, rec.Current), nil
}

// record loads Host's record, starting it from the node's currentConfig
// and the booted OS on a host it has none of.
func (h *Host) record(ctx context.Context) (hostRecord, error) {
	var rec hostRecord
	data, err := os.ReadFile(h.RecordPath)
	switch {
	case err == nil:
		if err := json.Unmarshal(data, &rec); err != nil {
			return rec, fmt.Errorf("parse %s: %w", h.RecordPath, err)
		}
		return rec, nil
	case !errors.Is(err, fs.ErrNotExist):
		return rec, fmt.Errorf("read %s: %w", h.RecordPath, err)
	}
	current, err := h.Current(ctx)
	if err != nil {
		return rec, fmt.Errorf("read the node's current config: %w", err)
	}
	if current == "" {
		return rec, fmt.Errorf("the node has no %s annotation: nodeward cannot tell which config the host runs", AnnotationCurrentConfig)
	}
	// The booted OS is the current config's: the MCO wrote currentConfig
	// when it provisioned the host, or the MCD when it last updated it.
	rec.Current = current
	return rec, h.save(rec)
}

func (h *Host) save(rec hostRecord) error {
	return atomicfile.WriteJSON(h.RecordPath, rec, 0o644)
}

// config reads and parses the MachineConfig a target names.
func (h *Host) config(ctx context.Context, target string) (*machineconfig.Config, error) {
	name, _ := SplitTarget(target)
	return h.Configs.Get(ctx, name)
}
