package machineconfig

import (
	"errors"
	"fmt"
	"io/fs"
)

// DriftError is the first path of a config whose state on disk is not what
// the config says: Path as the host sees it (/etc/foo), Field the config
// field asking for it, Message the machine-config-daemon's wording for the
// same mismatch where the MCD checks it (content mismatch for file
// "/etc/foo", mode mismatch for file: …), nodeward's own otherwise (owners,
// enablement links, paths the config removes).
type DriftError struct {
	Path    string
	Field   string
	Message string
}

func (e *DriftError) Error() string { return e.Message }

// Drift returns the first path, in the order Apply writes them (files,
// then each unit's drop-ins, unit file or mask and enablement links, then
// core's SSH keys), whose state on disk differs from cfg; nil when the host
// holds cfg exactly (what Applied reports). The error is for a path that
// could not be read or a config that cannot be planned, not for drift. It
// reads only.
func (w Writer) Drift(cfg *Config) (*DriftError, error) {
	if cfg == nil {
		return nil, errors.New("checking machine config: nil config")
	}
	p, err := buildPlan(w.Root, nil, cfg)
	if err != nil {
		return nil, fmt.Errorf("checking machine config %s: %w", cfg.Name, err)
	}
	for _, o := range p.ops {
		d, err := o.drift()
		if err != nil {
			return nil, fmt.Errorf("checking machine config %s: %w", cfg.Name, err)
		}
		if d != nil {
			return d, nil
		}
	}
	return nil, nil
}

// Paths lists where, under Root, every path Drift checks for cfg is: the
// files and directories to watch for drift. Like Drift, it reads the host
// (a unit's [Install] section, its existing links), so the list can change
// when the host does.
func (w Writer) Paths(cfg *Config) ([]string, error) {
	if cfg == nil {
		return nil, errors.New("listing machine config paths: nil config")
	}
	p, err := buildPlan(w.Root, nil, cfg)
	if err != nil {
		return nil, fmt.Errorf("listing machine config %s paths: %w", cfg.Name, err)
	}
	out := make([]string, len(p.ops))
	for i, o := range p.ops {
		out[i] = o.disk
	}
	return out, nil
}

// drift reads o's path and words how it differs from o.want, if it does.
func (o op) drift() (*DriftError, error) {
	have, err := readState(o.disk)
	var odd *oddFileError
	if errors.As(err, &odd) {
		return o.driftErr(o.oddMessage(odd.mode)), nil
	}
	if err != nil {
		return nil, err
	}
	d := o.want.diff(have)
	if d == diffNone {
		return nil, nil
	}
	switch o.role {
	case roleMask:
		return o.driftErr(o.maskMessage(have)), nil
	case roleEnable:
		return o.driftErr(o.enableMessage(have)), nil
	}
	return o.driftErr(o.fileMessage(have, d)), nil
}

func (o op) driftErr(msg string) *DriftError {
	return &DriftError{Path: o.hostPath, Field: o.field, Message: msg}
}

// fileMessage words a file's drift as checkFileContentsAndMode in the
// MCD's on_disk_validation.go does: stat, then mode, then contents.
func (o op) fileMessage(have state, d diff) string {
	want := o.want
	switch {
	case want.Kind == kindAbsent:
		return fmt.Sprintf("file %q exists; the config removes it", o.hostPath)
	case have.Kind == kindAbsent:
		return fmt.Sprintf("could not stat file %q: lstat %s: no such file or directory", o.hostPath, o.hostPath)
	case want.Kind != kindFile:
		return fmt.Sprintf("path %q: expected a link to %q", o.hostPath, want.Target)
	case have.Kind == kindSymlink:
		return modeMessage(o.hostPath, fromUnixMode(want.Mode), fs.ModeSymlink|0o777)
	}
	switch d {
	case diffMode:
		return modeMessage(o.hostPath, fromUnixMode(want.Mode), fromUnixMode(have.Mode))
	case diffContents:
		return fmt.Sprintf("content mismatch for file %q", o.hostPath)
	}
	return fmt.Sprintf("owner mismatch for file: %q; expected: %d:%d; received: %d:%d",
		o.hostPath, want.UID, want.GID, have.UID, have.GID)
}

// modeMessage is the MCD's mode mismatch, both modes as os.FileMode
// strings, decimal and octal.
func modeMessage(hostPath string, want, have fs.FileMode) string {
	return fmt.Sprintf("mode mismatch for file: %q; expected: %[2]v/%[2]d/%#[2]o; received: %[3]v/%[3]d/%#[3]o",
		hostPath, want, have)
}

// oddMessage words a directory (or FIFO, …) where a file or link belongs.
func (o op) oddMessage(mode fs.FileMode) string {
	if o.want.Kind == kindAbsent {
		return fmt.Sprintf("file %q exists; the config removes it", o.hostPath)
	}
	return modeMessage(o.hostPath, fromUnixMode(o.want.Mode), mode)
}

// maskMessage words a mask as checkV3Unit in the MCD does (its
// filepath.EvalSymlinks follows the link all the way; nodeward reports
// the link's own target).
func (o op) maskMessage(have state) string {
	switch {
	case o.want.Kind == kindAbsent:
		return fmt.Sprintf("unit %q is masked; the config unmasks it", o.unit)
	case have.Kind == kindAbsent:
		return fmt.Sprintf("state validation: error while evaluation symlink for path %q: lstat %s: no such file or directory", o.hostPath, o.hostPath)
	}
	received := have.Target
	if have.Kind == kindFile {
		received = o.hostPath // EvalSymlinks of a file is the file
	}
	return fmt.Sprintf("state validation: invalid unit masked setting. path: %q; expected: %v; received: %v", o.hostPath, devNull, received)
}

// enableMessage words an enablement link after the MCD's checkUnitEnabled
// ("unit %q expected enabled=true, but systemd reports %q"); nodeward
// reads the links where the MCD asks systemctl, so it names the link.
func (o op) enableMessage(have state) string {
	switch {
	case o.want.Kind == kindAbsent:
		return fmt.Sprintf("unit %q expected enabled=false, but its link %q exists", o.unit, o.hostPath)
	case have.Kind == kindAbsent:
		return fmt.Sprintf("unit %q expected enabled=true, but its link %q is missing", o.unit, o.hostPath)
	}
	return fmt.Sprintf("unit %q expected enabled=true, but %q is not a link to %q", o.unit, o.hostPath, o.want.Target)
}
