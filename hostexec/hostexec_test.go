package hostexec

import (
	"context"
	"errors"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
)

// TestLookPath: a name is found in the host's PATH under the root (a
// symbolic link counts: the kernel resolves it after the chroot), a file
// without the exec bit is skipped, an absolute path is kept, and a
// missing name is exec.ErrNotFound naming the root.
func TestLookPath(t *testing.T) {
	t.Parallel()
	root := t.TempDir()
	for _, d := range []string{"usr/bin", "usr/sbin", "bin"} {
		if err := os.MkdirAll(filepath.Join(root, d), 0o755); err != nil {
			t.Fatal(err)
		}
	}
	write := func(p string, mode os.FileMode) {
		if err := os.WriteFile(filepath.Join(root, p), []byte("#!/bin/true\n"), mode); err != nil {
			t.Fatal(err)
		}
	}
	write("usr/bin/tool", 0o755)
	write("usr/sbin/plain", 0o644)
	write("usr/bin/plain", 0o755)
	// An absolute link that resolves only inside the root.
	if err := os.Symlink("/usr/bin/tool", filepath.Join(root, "bin/linked")); err != nil {
		t.Fatal(err)
	}
	h := Host{Root: root}
	for name, want := range map[string]string{"tool": "/usr/bin/tool", "plain": "/usr/bin/plain", "linked": "/bin/linked", "/usr/bin/tool": "/usr/bin/tool"} {
		if got, err := h.lookPath(name); err != nil || got != want {
			t.Errorf("lookPath(%q) = %q, %v; want %q", name, got, err, want)
		}
	}
	cmd := h.Command(context.Background(), "missing", "arg")
	if !errors.Is(cmd.Err, exec.ErrNotFound) || !strings.Contains(cmd.Err.Error(), root) {
		t.Errorf("missing command: Err %v, want exec.ErrNotFound naming %s", cmd.Err, root)
	}
	if err := cmd.Run(); !errors.Is(err, exec.ErrNotFound) {
		t.Errorf("Run of a missing command: %v, want exec.ErrNotFound", err)
	}
	if _, err := h.lookPath("usr/bin/tool"); err == nil {
		t.Error("a relative path with a slash was accepted")
	}
	cmd = h.Command(context.Background(), "tool", "x")
	if cmd.Path != "/usr/bin/tool" || cmd.Dir != "/" || cmd.SysProcAttr == nil || cmd.SysProcAttr.Chroot != root || cmd.Args[0] != "tool" {
		t.Errorf("Command: Path %q Dir %q SysProcAttr %+v Args %q; want /usr/bin/tool in / chrooted into %s", cmd.Path, cmd.Dir, cmd.SysProcAttr, cmd.Args, root)
	}
	if direct := (Host{}).Command(context.Background(), "true"); direct.SysProcAttr != nil {
		t.Error("no root: the command is chrooted")
	}
}

func TestValidate(t *testing.T) {
	t.Parallel()
	file := filepath.Join(t.TempDir(), "f")
	if err := os.WriteFile(file, nil, 0o600); err != nil {
		t.Fatal(err)
	}
	for root, ok := range map[string]bool{"": true, t.TempDir(): true, "host": false, file: false, "/does/not/exist": false} {
		if err := (Host{Root: root}).Validate(); (err == nil) != ok {
			t.Errorf("Validate(%q) = %v, want ok=%v", root, err, ok)
		}
	}
}
