package machineconfig

import (
	"bytes"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"syscall"

	"github.com/nodeward/nodeward/atomicfile"
)

// errInvalid is EINVAL, what readlink answers for a file that is no link.
var errInvalid = syscall.EINVAL

// Kinds of what a path holds.
const (
	kindAbsent  = "absent"
	kindFile    = "file"
	kindSymlink = "symlink"
)

// state is what one path holds: nothing, a regular file, or a symlink.
// UID and GID of -1 mean "whoever creates it" (not running as root).
type state struct {
	Kind     string `json:"kind"`
	Mode     uint32 `json:"mode,omitempty"`
	UID      int    `json:"uid"`
	GID      int    `json:"gid"`
	Target   string `json:"target,omitempty"`
	Contents []byte `json:"-"`
}

// readState reads what disk holds at p, without following a final symlink.
func readState(p string) (state, error) {
	fi, err := os.Lstat(p)
	if errors.Is(err, fs.ErrNotExist) {
		return state{Kind: kindAbsent, UID: -1, GID: -1}, nil
	}
	if err != nil {
		return state{}, fmt.Errorf("inspecting %s: %w", p, err)
	}
	uid, gid := owner(fi)
	switch {
	case fi.Mode()&fs.ModeSymlink != 0:
		t, err := os.Readlink(p)
		if err != nil {
			return state{}, fmt.Errorf("reading link %s: %w", p, err)
		}
		return state{Kind: kindSymlink, Target: t, UID: uid, GID: gid}, nil
	case fi.Mode().IsRegular():
		b, err := os.ReadFile(p)
		if err != nil {
			return state{}, fmt.Errorf("reading %s: %w", p, err)
		}
		return state{Kind: kindFile, Mode: toUnixMode(fi.Mode()), UID: uid, GID: gid, Contents: b}, nil
	}
	return state{}, &oddFileError{path: p, mode: fi.Mode()}
}

// oddFileError is a path that holds neither a file nor a symlink (a
// directory, a FIFO, …): Apply refuses to replace it, Drift reports it as
// a mode mismatch, as the MCD's Lstat-based check does.
type oddFileError struct {
	path string
	mode fs.FileMode
}

func (e *oddFileError) Error() string {
	return fmt.Sprintf("%s is a %s, not a file or a symlink: refusing to replace it", e.path, e.mode.Type())
}

func owner(fi fs.FileInfo) (int, int) {
	if st, ok := fi.Sys().(*syscall.Stat_t); ok {
		return int(st.Uid), int(st.Gid)
	}
	return -1, -1
}

// diff is what differs between a path's state and the wanted one.
type diff int

// The differences, in the order diff looks for them: the MCD's check
// stats (kind), compares the mode, then the contents; owners last, since
// the MCD does not check them.
const (
	diffNone diff = iota
	diffKind
	diffMode
	diffContents
	diffTarget
	diffOwner
)

// diff is the one definition of "disk state have is the wanted state":
// the first difference found, diffNone when there is none. Ownership
// counts only where want names an owner.
func (want state) diff(have state) diff {
	if want.Kind != have.Kind {
		return diffKind
	}
	switch {
	case want.Kind == kindFile && want.Mode != have.Mode:
		return diffMode
	case want.Kind == kindFile && !bytes.Equal(want.Contents, have.Contents):
		return diffContents
	case want.Kind == kindSymlink && want.Target != have.Target:
		return diffTarget
	case (want.UID >= 0 && want.UID != have.UID) || (want.GID >= 0 && want.GID != have.GID):
		return diffOwner
	}
	return diffNone
}

// matches reports whether disk state have is the wanted state.
func (want state) matches(have state) bool { return want.diff(have) == diffNone }

// put makes disk path p hold s, atomically: a temporary file or link in the
// same directory, synced, renamed over p, and the directory synced, so that
// a crash leaves either the old or the new version, never a mix.
func put(p string, s state) error {
	switch s.Kind {
	case kindAbsent:
		return remove(p)
	case kindFile:
		return writeFileAtomic(p, s)
	case kindSymlink:
		return symlinkAtomic(p, s.Target)
	}
	return fmt.Errorf("writing %s: unknown kind %q", p, s.Kind)
}

func writeFileAtomic(p string, s state) (err error) {
	tmp, err := os.CreateTemp(filepath.Dir(p), "."+filepath.Base(p)+".nodeward-*")
	if err != nil {
		return fmt.Errorf("writing %s: %w", p, err)
	}
	defer func() {
		if err != nil {
			tmp.Close()
			os.Remove(tmp.Name())
		}
	}()
	if _, err = tmp.Write(s.Contents); err != nil {
		return fmt.Errorf("writing %s: %w", p, err)
	}
	// chown before chmod: chown clears setuid and setgid.
	if s.UID >= 0 && s.GID >= 0 && os.Geteuid() == 0 {
		if err = tmp.Chown(s.UID, s.GID); err != nil {
			return fmt.Errorf("changing owner of %s: %w", p, err)
		}
	}
	if err = tmp.Chmod(fromUnixMode(s.Mode)); err != nil {
		return fmt.Errorf("changing mode of %s: %w", p, err)
	}
	if err = tmp.Sync(); err != nil {
		return fmt.Errorf("syncing %s: %w", p, err)
	}
	if err = tmp.Close(); err != nil {
		return fmt.Errorf("closing %s: %w", p, err)
	}
	if err = os.Rename(tmp.Name(), p); err != nil {
		return fmt.Errorf("replacing %s: %w", p, err)
	}
	return atomicfile.SyncDir(filepath.Dir(p))
}

func symlinkAtomic(p, target string) error {
	tmp := filepath.Join(filepath.Dir(p), "."+filepath.Base(p)+".nodeward-link")
	_ = os.Remove(tmp) // a leftover of an interrupted run
	if err := os.Symlink(target, tmp); err != nil {
		return fmt.Errorf("linking %s: %w", p, err)
	}
	if err := os.Rename(tmp, p); err != nil {
		os.Remove(tmp)
		return fmt.Errorf("replacing %s: %w", p, err)
	}
	return atomicfile.SyncDir(filepath.Dir(p))
}

func remove(p string) error {
	err := os.Remove(p)
	if errors.Is(err, fs.ErrNotExist) {
		return nil
	}
	if err != nil {
		return fmt.Errorf("removing %s: %w", p, err)
	}
	return atomicfile.SyncDir(filepath.Dir(p))
}

// mkdirAll creates the missing directories of disk path dir with mode and,
// as root, the owner given (-1: leave as created). Directories that exist
// are left as they are. Created directories are not journaled: an empty
// directory left by a rollback is harmless, and removing one could race
// with another writer.
func mkdirAll(dir string, mode fs.FileMode, uid, gid int) error {
	if fi, err := os.Stat(dir); err == nil {
		if !fi.IsDir() {
			return fmt.Errorf("creating directory %s: a file is in the way", dir)
		}
		return nil
	}
	if err := mkdirAll(filepath.Dir(dir), mode, uid, gid); err != nil {
		return err
	}
	if err := os.Mkdir(dir, mode); err != nil && !errors.Is(err, fs.ErrExist) {
		return fmt.Errorf("creating directory %s: %w", dir, err)
	}
	if uid >= 0 && gid >= 0 && os.Geteuid() == 0 {
		if err := os.Chown(dir, uid, gid); err != nil {
			return fmt.Errorf("changing owner of %s: %w", dir, err)
		}
	}
	// Mkdir's mode went through the umask.
	return os.Chmod(dir, mode)
}
