package machineconfig

import (
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path"
	"strings"
)

// op is one path and what it must hold after Apply.
type op struct {
	hostPath string // as the host sees it: /etc/foo
	disk     string // where it is under the Writer's root
	field    string // the config field asking for it, for errors
	want     state
	// unit and role say which unit a mask or enablement link is for, to
	// word a drift as the MCD words it.
	unit string
	role linkRole
	// dirMode and dirUID/dirGID are for parent directories Apply creates.
	dirMode        fs.FileMode
	dirUID, dirGID int
}

// linkRole is what a unit's link op is: none (a file), a mask, or an
// enablement link.
type linkRole int

const (
	roleFile linkRole = iota
	roleMask
	roleEnable
)

// plan is the ordered list of paths an Apply touches.
type plan struct {
	root  string
	ops   []op
	index map[string]int
}

// add appends o unless the path is planned already: with the same wanted
// state that is harmless, with another it is a conflict in the config.
func (p *plan) add(o op) error {
	if i, ok := p.index[o.hostPath]; ok {
		prev := p.ops[i]
		if prev.want.Kind == o.want.Kind && prev.want.matches(o.want) {
			return nil
		}
		return fieldErr(o.field, o.hostPath, "conflicts with "+prev.field)
	}
	disk, err := resolve(p.root, o.hostPath)
	if err != nil {
		return fieldErr(o.field, o.hostPath, err.Error())
	}
	o.disk = disk
	if o.dirMode == 0 {
		o.dirMode, o.dirUID, o.dirGID = 0o755, -1, -1
	}
	p.index[o.hostPath] = len(p.ops)
	p.ops = append(p.ops, o)
	return nil
}

// planned reports whether a path is in the plan already.
func (p *plan) planned(hostPath string) bool {
	_, ok := p.index[hostPath]
	return ok
}

// buildPlan lists what desired needs on disk and, with a current config,
// what current put there that desired no longer has.
func buildPlan(root string, current, desired *Config) (*plan, error) {
	p := &plan{root: root, index: map[string]int{}}
	steps := []func() error{
		func() error { return p.addFiles(desired.Files) },
		func() error { return p.addUnits(desired.Units) },
		func() error { return p.addSSHKeys(current, desired) },
	}
	if current != nil {
		steps = append(steps,
			func() error { return p.removeFiles(current.Files) },
			func() error { return p.removeUnits(current.Units, desired.Units) })
	}
	for _, step := range steps {
		if err := step(); err != nil {
			return nil, err
		}
	}
	return p, nil
}

func (p *plan) addFiles(files []File) error {
	for i, f := range files {
		field := fmt.Sprintf("spec.config.storage.files[%d]", i)
		uid, gid, err := resolveOwner(p.root, f.User, f.Group)
		if err != nil {
			return fieldErr(field+".user", f.Path, err.Error())
		}
		uid, gid = ownerIfRoot(uid, gid)
		want := state{Kind: kindFile, Mode: toUnixMode(f.Mode), UID: uid, GID: gid, Contents: f.Contents}
		if err := p.add(op{hostPath: f.Path, field: field + ".path", want: want}); err != nil {
			return err
		}
	}
	return nil
}

// ownerIfRoot drops ownership when not running as root: an unprivileged
// Writer (tests) can neither set nor expect it.
func ownerIfRoot(uid, gid int) (int, int) {
	if os.Geteuid() != 0 {
		return -1, -1
	}
	return uid, gid
}

// sshKeyPath is where Ignition and the MCD put core's keys on RHCOS 9,
// Fedora CoreOS and CentOS Stream CoreOS, relative to core's home. The
// MCD dropped RHCOS 8's ~/.ssh/authorized_keys with RHEL 8 support.
const sshKeyPath = ".ssh/authorized_keys.d/ignition"

// addSSHKeys writes core's keys when desired has some, or when current had
// some that must go; a host never given keys gets no empty file. A host
// without a core user is skipped, as the MCD skips it.
func (p *plan) addSSHKeys(current, desired *Config) error {
	hadKeys := current != nil && len(current.SSHKeys) > 0
	if len(desired.SSHKeys) == 0 && !hadKeys {
		return nil
	}
	core, err := lookupUser(p.root, coreUser)
	if errors.Is(err, errNoAccount) {
		return nil
	}
	if err != nil {
		return fmt.Errorf("planning SSH keys: %w", err)
	}
	home := core.home
	if home == "" || !path.IsAbs(home) {
		home = "/home/" + coreUser
	}
	var b strings.Builder
	for _, k := range desired.SSHKeys {
		b.WriteString(k + "\n")
	}
	uid, gid := ownerIfRoot(core.id, core.gid)
	return p.add(op{
		hostPath: path.Join(home, sshKeyPath),
		field:    "spec.config.passwd.users",
		want:     state{Kind: kindFile, Mode: 0o600, UID: uid, GID: gid, Contents: []byte(b.String())},
		dirMode:  0o700, dirUID: uid, dirGID: gid,
	})
}

// removeFiles plans the files current has and desired has not.
func (p *plan) removeFiles(files []File) error {
	for i, f := range files {
		if p.planned(f.Path) {
			continue
		}
		if err := p.revert(f.Path, fmt.Sprintf("spec.config.storage.files[%d].path", i)); err != nil {
			return err
		}
	}
	return nil
}

// revert plans a path a config no longer asks for back to the OS default:
// on rpm-ostree hosts the pristine copy of /etc/X is /usr/etc/X, and a
// file shipped there is restored rather than deleted (the MCD keeps a
// .mcdorig copy for the same purpose). Anything else is removed.
func (p *plan) revert(hostPath, field string) error {
	want := state{Kind: kindAbsent, UID: -1, GID: -1}
	if rest, ok := strings.CutPrefix(hostPath, "/etc/"); ok {
		pristine, err := resolve(p.root, "/usr/etc/"+rest)
		if err != nil {
			return fieldErr(field, hostPath, err.Error())
		}
		s, err := readState(pristine)
		if err != nil {
			return fmt.Errorf("reading the default of %s: %w", hostPath, err)
		}
		if s.Kind != kindAbsent {
			s.UID, s.GID = ownerIfRoot(s.UID, s.GID)
			want = s
		}
	}
	return p.add(op{hostPath: hostPath, field: field, want: want})
}
