package rpmostree

import (
	"context"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"
)

// Build compiles the double into dir and returns the binary's path.
func Build(dir string) (string, error) { return build(dir, nil) }

// BuildStatic is Build with cgo off: a static binary that runs in a root
// holding nothing else (a host root the agent chroots into).
func BuildStatic(dir string) (string, error) { return build(dir, []string{"CGO_ENABLED=0"}) }

// HostRoot makes a tiny host root filesystem in a temporary directory:
// the static double at /usr/bin/rpm-ostree and nothing else. It returns
// the root and the double's path outside it.
func HostRoot(t testing.TB) (root, double string) {
	t.Helper()
	root = t.TempDir()
	bin := filepath.Join(root, "usr", "bin")
	if err := os.MkdirAll(bin, 0o755); err != nil {
		t.Fatal(err)
	}
	double, err := BuildStatic(bin)
	if err != nil {
		t.Fatal(err)
	}
	return root, double
}

func build(dir string, env []string) (string, error) {
	bin := filepath.Join(dir, "rpm-ostree")
	cmd := exec.Command("go", "build", "-o", bin, "github.com/nodeward/nodeward/test/rpmostree/cmd/rpm-ostree")
	cmd.Env = append(os.Environ(), env...)
	if out, err := cmd.CombinedOutput(); err != nil {
		return "", fmt.Errorf("building the rpm-ostree double: %w: %s", err, out)
	}
	return bin, nil
}

// Double is one fake host: its state dir and the binary to run.
type Double struct {
	Dir    string
	Binary string
}

// New creates a host booted into booted, with images served by the fake
// registry (keyed by reference without transport).
func New(t testing.TB, binary string, booted Deployment, images map[string]Image) *Double {
	t.Helper()
	d, err := Create(t.TempDir(), binary, booted, images)
	if err != nil {
		t.Fatal(err)
	}
	return d
}

// Create is New for callers without a testing.TB: the host's state lives
// in dir.
func Create(dir, binary string, booted Deployment, images map[string]Image) (*Double, error) {
	d := &Double{Dir: dir, Binary: binary}
	s := &State{OSName: "fedora-coreos", Deployments: []Deployment{booted}, Images: images}
	if err := s.Save(d.Dir); err != nil {
		return nil, err
	}
	if err := d.writeBootFiles(s, nil); err != nil {
		return nil, err
	}
	return d, nil
}

// Env is the environment the binary needs.
func (d *Double) Env() []string { return []string{EnvDir + "=" + d.Dir} }

// CmdlinePath is the double's /proc/cmdline.
func (d *Double) CmdlinePath() string { return filepath.Join(d.Dir, "cmdline") }

// State returns the current state.
func (d *Double) State(t testing.TB) *State {
	t.Helper()
	s, err := Load(d.Dir)
	if err != nil {
		t.Fatal(err)
	}
	return s
}

// Update changes the state.
func (d *Double) Update(t testing.TB, change func(*State)) {
	t.Helper()
	if err := d.Change(change); err != nil {
		t.Fatal(err)
	}
}

// Change is Update for callers without a testing.TB. Only while no
// rpm-ostree of the host runs: it does not take the transaction lock.
func (d *Double) Change(change func(*State)) error {
	s, err := Load(d.Dir)
	if err != nil {
		return err
	}
	change(s)
	return s.Save(d.Dir)
}

// Inject makes verb ("*" for every verb) fail as f says.
func (d *Double) Inject(t testing.TB, verb string, f Failure) {
	t.Helper()
	d.Update(t, func(s *State) {
		if s.Failures == nil {
			s.Failures = map[string]Failure{}
		}
		s.Failures[verb] = f
	})
}

// Boot simulates a reboot, planned or not. At shutdown
// ostree-finalize-staged writes an unlocked staged deployment as the new
// default; a locked one is left out (the OS stays as it is). Then the
// bootloader starts the default entry, or the second one when BootWrong.
func (d *Double) Boot(t testing.TB) {
	t.Helper()
	if err := d.BootHost(); err != nil {
		t.Fatal(err)
	}
}

// BootHost is Boot for callers without a testing.TB.
func (d *Double) BootHost() error {
	s, err := Load(d.Dir)
	if err != nil {
		return err
	}
	journal, err := s.boot()
	if err != nil {
		return err
	}
	if err := s.Save(d.Dir); err != nil {
		return err
	}
	return d.writeBootFiles(s, journal)
}

// boot is what a boot does to the host: ostree-finalize-staged at the
// shutdown before it, then the bootloader. It returns the journal lines of
// ostree-finalize-staged in the shutdown.
func (s *State) boot() ([]string, error) {
	var journal []string
	if st := s.Staged; st != nil {
		switch {
		case s.Locked:
			journal = append(journal, "Not finalizing; found /run/ostree/staged-deployment-locked")
		case s.FailFinalize:
			journal = append(journal, "Finalizing staged deployment",
				"error: Finalizing deployment: Copying /etc: No space left on device",
				"ostree-finalize-staged.service: Failed with result 'exit-code'.")
			s.FailFinalize = false
		default:
			booted, err := s.BootedDeployment()
			if err != nil {
				return nil, err
			}
			journal = append(journal, "Finalizing staged deployment", "Bootloader updated; bootconfig swap: yes; bootversion: boot.1")
			s.Deployments = []Deployment{*st, *booted} // ostree keeps the new and the booted
		}
		s.Staged, s.Locked = nil, false
	}
	s.Booted = 0
	if s.BootWrong && len(s.Deployments) > 1 {
		s.Booted, s.BootWrong = 1, false
	}
	s.RebootRequested = false
	s.Boots++
	return journal, nil
}

// BootIDPath is the double's /proc/sys/kernel/random/boot_id: it changes
// at every boot.
func (d *Double) BootIDPath() string { return filepath.Join(d.Dir, "boot_id") }

func (d *Double) writeBootFiles(s *State, journal []string) error {
	if err := writeBootFiles(d.Dir, s, journal); err != nil {
		return err
	}
	bootID := fmt.Sprintf("%08x-0000-4000-8000-%012x\n", s.Boots, time.Now().UnixNano()&0xffffffffffff)
	return os.WriteFile(d.BootIDPath(), []byte(bootID), 0o600)
}

// writeBootFiles writes what a boot leaves behind besides its boot ID: the
// booted kernel command line and the previous boot's journal of
// ostree-finalize-staged.
func writeBootFiles(dir string, s *State, journal []string) error {
	if err := os.WriteFile(filepath.Join(dir, "cmdline"), []byte(s.Cmdline()), 0o600); err != nil {
		return err
	}
	return os.WriteFile(filepath.Join(dir, "journal-previous-boot"), []byte(strings.Join(journal, "\n")), 0o600)
}

// Journal reads the double's previous-boot journal of
// ostree-finalize-staged; it satisfies osupdate.JournalReader.
type Journal struct{ Dir string }

// PreviousBoot returns the lines the last Boot logged for the unit.
func (j Journal) PreviousBoot(_ context.Context, unit string) ([]string, error) {
	if unit != "ostree-finalize-staged.service" {
		return nil, nil
	}
	data, err := os.ReadFile(filepath.Join(j.Dir, "journal-previous-boot"))
	if err != nil {
		return nil, fmt.Errorf("reading double journal: %w", err)
	}
	if len(data) == 0 {
		return nil, nil
	}
	return strings.Split(string(data), "\n"), nil
}

// FollowKernel makes the double follow the boots of the kernel whose boot
// ID file is bootIDPath (see State.KernelBootIDPath): for a host that
// really reboots, such as a systemd-nspawn container.
func (d *Double) FollowKernel(bootIDPath string) error {
	return d.Change(func(s *State) { s.KernelBootIDPath = bootIDPath })
}
