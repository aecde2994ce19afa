package osupdate_test

import (
	"errors"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/nodeward/nodeward/osupdate"
	"github.com/nodeward/nodeward/test/rpmostree"
	"github.com/nodeward/nodeward/test/testenv"
)

// TestHostRoot runs the updater as the DaemonSet does: the host's root is
// a directory (here a tiny one: the static rpm-ostree double in
// /usr/bin and its state), and rpm-ostree runs chrooted into it. The
// double's state directory is given by its path INSIDE the root, which
// does not exist outside it: the double can only have found its state,
// and staged the target there, if it ran in the root.
func TestHostRoot(t *testing.T) {
	t.Parallel()
	testenv.RequireRoot(t)
	root, _ := rpmostree.HostRoot(t)
	const inRoot = "/nodeward-hostroot-test/rpm-ostree-double"
	if _, err := os.Stat(inRoot); !errors.Is(err, os.ErrNotExist) {
		t.Fatalf("%s exists outside the test's root (%v): the test would prove nothing", inRoot, err)
	}
	if err := os.MkdirAll(filepath.Join(root, inRoot), 0o755); err != nil {
		t.Fatal(err)
	}
	d, err := rpmostree.Create(filepath.Join(root, inRoot), "/usr/bin/rpm-ostree",
		rpmostree.Deployment{Checksum: oldSum, ImageRef: oldRef, Digest: "sha256:" + strings.Repeat("a", 64), Kargs: []string{"rw"}},
		map[string]rpmostree.Image{newImage: {Checksum: newSum, Digest: newDigest, Version: "42.1"}})
	if err != nil {
		t.Fatal(err)
	}
	newUpdater := func(hostRoot string) *osupdate.Updater {
		u, err := osupdate.New(osupdate.Config{
			HostRoot:        hostRoot,
			Env:             []string{rpmostree.EnvDir + "=" + inRoot},
			Policy:          osupdate.Policy{DefaultTransport: osupdate.TransportUnverifiedRegistry},
			StatePath:       filepath.Join(t.TempDir(), "osupdate.json"),
			CmdlinePath:     d.CmdlinePath(), // read by nodeward itself, outside the chroot
			Journal:         rpmostree.Journal{Dir: d.Dir},
			StatusTimeout:   5 * time.Second,
			StageTimeout:    5 * time.Second,
			TransactionWait: 10 * time.Second,
			PollInterval:    20 * time.Millisecond,
			Backoff:         osupdate.Backoff{Initial: 10 * time.Millisecond, Attempts: 1},
		})
		if err != nil {
			t.Fatal(err)
		}
		return u
	}

	c := ctx(t)
	u := newUpdater(root)
	if got, err := u.Booted(c); err != nil || got != oldRef {
		t.Fatalf("Booted in the host root = %q, %v; want %q", got, err, oldRef)
	}
	if err := u.Stage(c, target); err != nil {
		t.Fatalf("Stage in the host root: %v", err)
	}
	if s := d.State(t); s.Staged == nil || s.Staged.Checksum != newSum {
		t.Errorf("the double's state under the root: staged %+v, want %s", s.Staged, newSum)
	}

	// Without the host root the same command is looked up in this
	// process's PATH; whatever runs cannot reach the state in the root.
	if _, err := newUpdater("").Booted(c); err == nil {
		t.Error("Booted without the host root succeeded: the state was reachable outside the root")
	}

	// A root without the command names it and the root.
	_, err = newUpdater(t.TempDir()).Booted(c)
	if !errors.Is(err, exec.ErrNotFound) || !strings.Contains(err.Error(), "host root") {
		t.Errorf("Booted in an empty root: %v, want exec.ErrNotFound naming the host root", err)
	}

	if _, err := osupdate.New(osupdate.Config{HostRoot: "host"}); err == nil || !strings.Contains(err.Error(), "hostRoot") {
		t.Errorf("relative host root: %v, want an error naming hostRoot", err)
	}
}
