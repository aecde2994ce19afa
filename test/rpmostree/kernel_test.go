package rpmostree

import (
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"
)

// TestFollowKernelBoots: with KernelBootIDPath set, the first invocation
// in a new kernel boot applies the finalized deployment (as
// ostree-finalize-staged did at the shutdown) and a locked one is left out;
// invocations in the same boot change nothing.
func TestFollowKernelBoots(t *testing.T) {
	dir := t.TempDir()
	bootID := filepath.Join(t.TempDir(), "boot_id")
	setBoot := func(id string) {
		t.Helper()
		if err := os.WriteFile(bootID, []byte(id+"\n"), 0o600); err != nil {
			t.Fatal(err)
		}
	}
	old := Deployment{Checksum: strings.Repeat("0a", 32), ImageRef: "ostree-unverified-registry:example/os:1", Kargs: []string{"rw"}}
	newSum := strings.Repeat("1b", 32)
	d, err := Create(dir, "", old, map[string]Image{"example/os:2": {Checksum: newSum, Digest: "sha256:" + strings.Repeat("c", 64), Version: "2"}})
	if err != nil {
		t.Fatal(err)
	}
	if err := d.FollowKernel(bootID); err != nil {
		t.Fatal(err)
	}
	run := func(args ...string) string {
		t.Helper()
		out, errOut, code := Run(dir, args)
		if code != 0 {
			t.Fatalf("rpm-ostree %v: exit %d: %s", args, code, errOut)
		}
		return string(out)
	}
	booted := func() string {
		t.Helper()
		s := d.State(t)
		b, err := s.BootedDeployment()
		if err != nil {
			t.Fatal(err)
		}
		return b.Checksum
	}

	setBoot("boot-1")
	run("rebase", "--lock-finalization", "ostree-unverified-registry:example/os:2")
	setBoot("boot-2") // a reboot with the deployment still locked
	run("status", "--json")
	if s := d.State(t); booted() != old.Checksum || s.Staged != nil || s.Boots != 1 {
		t.Fatalf("after a reboot with a locked deployment: booted %s, staged %v, boots %d; want the old one, nothing staged, 1 boot", booted(), s.Staged, s.Boots)
	}

	run("rebase", "--lock-finalization", "ostree-unverified-registry:example/os:2")
	d.Update(t, func(s *State) { s.FinalizeDelay = 300 * time.Millisecond })
	start := time.Now()
	if out := run("finalize-deployment", newSum); !strings.Contains(out, "Initiating reboot") {
		t.Fatalf("finalize-deployment said %q", out)
	}
	if took := time.Since(start); took < 300*time.Millisecond {
		t.Fatalf("finalize-deployment took %s, want at least the FinalizeDelay", took)
	}
	run("status", "--json") // same boot: nothing happens
	if booted() != old.Checksum {
		t.Fatalf("booted %s before the reboot", booted())
	}
	setBoot("boot-3")
	run("status", "--json")
	s := d.State(t)
	if booted() != newSum || s.Staged != nil || s.Boots != 2 || s.KernelBootID != "boot-3" || s.CallCount("finalize-deployment") != 1 {
		t.Fatalf("after the reboot: booted %s, staged %v, boots %d, boot ID %q, %d finalize calls; want %s, nothing staged, 2, boot-3, 1",
			booted(), s.Staged, s.Boots, s.KernelBootID, s.CallCount("finalize-deployment"), newSum)
	}
	journal, err := Journal{Dir: dir}.PreviousBoot(t.Context(), "ostree-finalize-staged.service")
	if err != nil || len(journal) == 0 || journal[0] != "Finalizing staged deployment" {
		t.Fatalf("previous boot's journal: %q (%v)", journal, err)
	}
	if cmdline, err := os.ReadFile(d.CmdlinePath()); err != nil || !strings.Contains(string(cmdline), newSum) {
		t.Fatalf("cmdline after the reboot: %q (%v)", cmdline, err)
	}
}
