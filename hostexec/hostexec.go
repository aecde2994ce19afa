// Package hostexec runs the host's own commands (rpm-ostree, journalctl,
// systemctl) on the host, from wherever the agent runs: directly when the
// agent is a host service (Root empty), or chrooted into the host's root
// filesystem when the agent is a DaemonSet pod that mounts it (Root
// "/host"), as OpenShift's machine-config-daemon does with /rootfs.
//
// Why chroot rather than the host's system bus (rpm-ostreed's and
// systemd's D-Bus APIs): the CLIs are the interfaces nodeward already
// speaks and tests (rpm-ostree's JSON status, its exit codes and stderr,
// journalctl's output), they are the host's own version, matched to its
// daemons, and a chroot needs only CAP_SYS_CHROOT and the host root
// mounted with its submounts (/proc, /dev, /run: the CLIs reach their
// daemons through the host's /run). The D-Bus route would mean a second
// client of rpm-ostreed's transaction API to keep in step with the CLI's,
// and journal reading has no D-Bus API at all. The reboot itself already
// goes to logind over the bus (package systemd); only its fallback,
// `systemctl reboot`, runs here.
//
// hostexec is a leaf: it imports nothing of nodeward, so osupdate and
// systemd share it without importing each other.
package hostexec

import (
	"context"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"syscall"
)

// HostPath is the PATH host commands are looked up in and run with: a
// host's, not the container's.
const HostPath = "/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin"

// Host says where host commands run. The zero value runs them directly.
type Host struct {
	// Root is the host's root filesystem as this process sees it; empty
	// runs commands in this process's own root.
	Root string
}

// Validate refuses a Root that is not an absolute path to a directory.
func (h Host) Validate() error {
	if h.Root == "" {
		return nil
	}
	if !filepath.IsAbs(h.Root) {
		return fmt.Errorf("host root %q: must be an absolute path", h.Root)
	}
	st, err := os.Stat(h.Root)
	if err != nil {
		return fmt.Errorf("host root: %w", err)
	}
	if !st.IsDir() {
		return fmt.Errorf("host root %q: not a directory", h.Root)
	}
	return nil
}

// Command is exec.CommandContext for a host command. With Root set, name
// is looked up in HostPath under Root, and the child chroots into Root and
// starts in its "/" before exec, so the binary, its libraries and every
// path it opens are the host's. A name not found there leaves the error in
// cmd.Err, which Run and Start return.
func (h Host) Command(ctx context.Context, name string, args ...string) *exec.Cmd {
	if h.Root == "" {
		return exec.CommandContext(ctx, name, args...)
	}
	path, err := h.lookPath(name)
	cmd := exec.CommandContext(ctx, path, args...)
	cmd.Args[0] = name
	cmd.Dir = "/"
	cmd.SysProcAttr = &syscall.SysProcAttr{Chroot: h.Root}
	if err != nil {
		cmd.Err = err
	}
	return cmd
}

// lookPath finds name in HostPath under Root and returns its path inside
// Root. Lstat, not Stat: a symbolic link is resolved by the kernel after
// the chroot, where an absolute link points at the host's file.
func (h Host) lookPath(name string) (string, error) {
	if strings.Contains(name, "/") {
		if !filepath.IsAbs(name) {
			return name, fmt.Errorf("exec %q: a host command must be a name or an absolute path", name)
		}
		if _, err := os.Lstat(filepath.Join(h.Root, name)); err != nil {
			return name, fmt.Errorf("exec %q under host root %s: %w", name, h.Root, err)
		}
		return name, nil
	}
	for _, dir := range filepath.SplitList(HostPath) {
		p := filepath.Join(dir, name)
		st, err := os.Lstat(filepath.Join(h.Root, p))
		if err == nil && (st.Mode()&os.ModeSymlink != 0 || (st.Mode().IsRegular() && st.Mode()&0o111 != 0)) {
			return p, nil
		}
	}
	return name, &exec.Error{Name: name, Err: fmt.Errorf("%w under host root %s (PATH %s)", exec.ErrNotFound, h.Root, HostPath)}
}
