package machineconfig

import (
	"context"
	"errors"
	"fmt"
	"os"
	"path/filepath"
)

// Writer applies configs to a host's files under Root ("/" on a host, the
// host's mount in a container, a temporary directory in tests). StateDir is
// a directory of the agent's own (not under Root) where the backup of the
// paths Apply replaces is kept until Commit or Restore.
type Writer struct {
	Root     string
	StateDir string
}

// Apply makes the host hold desired's files, units and core's SSH keys and
// reverts what current had that desired has not. current may be nil (no
// config known to be on the host: nothing is removed). Before it changes
// anything it records every path it will touch in the backup; running it
// again after an interruption, with the same configs, finishes the job.
func (w Writer) Apply(ctx context.Context, current, desired *Config) error {
	if desired == nil {
		return errors.New("applying machine config: nil desired config")
	}
	p, err := buildPlan(w.Root, current, desired)
	if err != nil {
		return fmt.Errorf("applying machine config %s: %w", desired.Name, err)
	}
	j, err := loadJournal(w.StateDir)
	if err != nil {
		return fmt.Errorf("applying machine config %s: %w", desired.Name, err)
	}
	if err := j.record(p); err != nil {
		return fmt.Errorf("applying machine config %s: %w", desired.Name, err)
	}
	for _, o := range p.ops {
		if err := ctx.Err(); err != nil {
			return fmt.Errorf("applying machine config %s: %w", desired.Name, err)
		}
		if err := converge(o.disk, o.want, o.dirMode, o.dirUID, o.dirGID); err != nil {
			return fmt.Errorf("applying machine config %s: %w", desired.Name, err)
		}
	}
	return nil
}

// converge writes want at disk unless it is there already, so that re-runs
// rewrite nothing.
func converge(disk string, want state, dirMode os.FileMode, uid, gid int) error {
	have, err := readState(disk)
	if err != nil {
		return err
	}
	if want.matches(have) {
		return nil
	}
	if want.Kind != kindAbsent {
		if err := mkdirAll(filepath.Dir(disk), dirMode, uid, gid); err != nil {
			return err
		}
	}
	return put(disk, want)
}

// Restore puts every path Apply recorded back as it was, then forgets the
// backup. Without a backup it does nothing, so it can be re-run after an
// interruption.
func (w Writer) Restore(ctx context.Context) error {
	j, err := loadJournal(w.StateDir)
	if err != nil {
		return fmt.Errorf("restoring the previous machine config: %w", err)
	}
	for _, e := range j.Entries {
		if err := ctx.Err(); err != nil {
			return fmt.Errorf("restoring the previous machine config: %w", err)
		}
		if err := w.restoreEntry(j, e); err != nil {
			return fmt.Errorf("restoring the previous machine config: %w", err)
		}
	}
	return j.forget()
}

func (w Writer) restoreEntry(j *journal, e entry) error {
	disk, err := resolve(w.Root, e.Path)
	if err != nil {
		return fieldErr("backup", e.Path, err.Error())
	}
	prev, err := j.previous(e)
	if err != nil {
		return err
	}
	// A symlink's owner is whoever creates it; only files get theirs back.
	if prev.Kind != kindFile {
		prev.UID, prev.GID = -1, -1
	}
	return converge(disk, prev, 0o755, -1, -1)
}

// Applied reports whether the host holds desired's files, units and keys
// exactly: contents, modes, links and, when running as root, owners. It
// reads only; use it to verify an update after the boot. It is Drift
// finding nothing: one definition of "on disk as the config says".
func (w Writer) Applied(desired *Config) (bool, error) {
	d, err := w.Drift(desired)
	if err != nil {
		return false, err
	}
	return d == nil, nil
}

// Commit forgets the backup once the update is verified: the next Apply
// records the then current state afresh.
func (w Writer) Commit() error {
	j, err := loadJournal(w.StateDir)
	if err != nil {
		return fmt.Errorf("committing the machine config: %w", err)
	}
	return j.forget()
}
