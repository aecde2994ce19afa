package hostmode

import (
	_ "embed"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
)

// CRIOUnit is CRI-O's own unit, contrib/systemd/crio.service of cri-o
// v1.34.0 (the version test/node/crio builds), copied verbatim: Type=notify,
// ExecReload=/bin/kill -s HUP $MAINPID, the binary at /usr/local/bin/crio.
//
//go:embed crio.service
var CRIOUnit []byte

// Paths of CRI-O inside the container: the unit's binary and the default
// configuration file, drop-in directory and socket (the ones a
// MachineConfig writes to and `crio status` asks).
const (
	CRIOBinaryPath   = "/usr/local/bin/crio"
	CRIOUnitPath     = "/etc/systemd/system/crio.service"
	CRIOConfigPath   = "/etc/crio/crio.conf"
	CRIODropInDir    = "/etc/crio/crio.conf.d"
	CRIOSocket       = "/run/crio/crio.sock"
	crioPinnsPath    = "/usr/local/bin/pinns"
	crioNetworkDir   = "/etc/cni/net.d"
	crioPolicyPath   = "/etc/containers/policy.json"
	crioRegistryPath = "/etc/containers/registries.conf"
)

// CRIOInstall is CRI-O installed on a host root as a distribution installs
// it: its binary and unit, enabled, its configuration under /etc/crio,
// and what it checks at start (pinns, conmon, runc). Conmon and runc are
// the test host's (Debian's packages), copied with the shared libraries
// the root lacks; they must run against the root's C library, which holds
// when the host and the root are the same release (bookworm, as in CI).
type CRIOInstall struct {
	Root string
	// Crio and Pinns are `make testbin`'s; Conmon and Runc the host's.
	Crio, Pinns, Conmon, Runc string
}

// Apply writes everything into Root.
func (in CRIOInstall) Apply() error {
	at := func(p string) string { return filepath.Join(in.Root, p) }
	for from, to := range map[string]string{in.Crio: CRIOBinaryPath, in.Pinns: crioPinnsPath, in.Conmon: in.Conmon, in.Runc: in.Runc} {
		if err := copyWithLibraries(in.Root, from, to); err != nil {
			return fmt.Errorf("install CRI-O into the container root: %w", err)
		}
	}
	files := map[string]string{
		CRIOUnitPath:     string(CRIOUnit),
		CRIOConfigPath:   crioConfig(in.Conmon, in.Runc),
		crioPolicyPath:   `{"default": [{"type": "insecureAcceptAnything"}]}` + "\n",
		crioRegistryPath: "unqualified-search-registries = []\n",
	}
	for path, data := range files {
		if err := writeFile(at(path), []byte(data), 0o644); err != nil {
			return fmt.Errorf("install CRI-O into the container root: %w", err)
		}
	}
	for _, dir := range []string{CRIODropInDir, crioNetworkDir, "/etc/systemd/system/multi-user.target.wants"} {
		if err := os.MkdirAll(at(dir), 0o755); err != nil {
			return err
		}
	}
	return os.Symlink(CRIOUnitPath, at("/etc/systemd/system/multi-user.target.wants/crio.service"))
}

// crioConfig is /etc/crio/crio.conf: CRI-O's defaults but for what a
// container under systemd-nspawn needs — vfs storage (no overlay mounts
// in the container), cgroupfs (the container's systemd does not delegate
// to CRI-O), no SELinux or AppArmor profile, no irqbalance file, no
// metrics port or NRI socket — and runc under conmon at the copied paths.
// The pause image and log level are left to the drop-ins: the
// MachineConfig's.
func crioConfig(conmon, runc string) string {
	return fmt.Sprintf(`[crio]
storage_driver = "vfs"
[crio.runtime]
default_runtime = "runc"
cgroup_manager = "cgroupfs"
selinux = false
apparmor_profile = "unconfined"
pinns_path = %q
irqbalance_config_restore_file = "disable"
disable_hostport_mapping = true
[crio.runtime.runtimes.runc]
runtime_path = %q
runtime_type = "oci"
monitor_path = %q
monitor_cgroup = "pod"
[crio.metrics]
enable_metrics = false
[crio.nri]
enable_nri = false
`, crioPinnsPath, runc, conmon)
}

// copyWithLibraries copies the host program from to path to in root, and
// each shared library ldd resolves for it that root does not have, at the
// same path (the root's /lib is its own /usr/lib, merged /usr as the
// host's).
func copyWithLibraries(root, from, to string) error {
	data, err := os.ReadFile(from)
	if err != nil {
		return err
	}
	if err := writeFile(filepath.Join(root, to), data, 0o755); err != nil {
		return err
	}
	libs, err := sharedLibraries(from)
	if err != nil {
		return err
	}
	for _, lib := range libs {
		if _, err := os.Stat(filepath.Join(root, lib)); err == nil {
			continue // the root's own
		}
		real, err := filepath.EvalSymlinks(lib)
		if err != nil {
			return err
		}
		data, err := os.ReadFile(real)
		if err != nil {
			return err
		}
		if err := writeFile(filepath.Join(root, lib), data, 0o644); err != nil {
			return err
		}
	}
	return nil
}

// sharedLibraries lists the paths ldd resolves for a program (none for a
// static one).
func sharedLibraries(program string) ([]string, error) {
	out, err := exec.Command("ldd", program).CombinedOutput()
	if err != nil {
		if strings.Contains(string(out), "not a dynamic executable") {
			return nil, nil
		}
		return nil, fmt.Errorf("ldd %s: %w: %s", program, err, out)
	}
	var libs []string
	for _, line := range strings.Split(string(out), "\n") {
		// "libfoo.so.1 => /lib/x86_64-linux-gnu/libfoo.so.1 (0x…)" or
		// "/lib64/ld-linux-x86-64.so.2 (0x…)".
		fields := strings.Fields(line)
		for i, f := range fields {
			if strings.HasPrefix(f, "/") && (i == 0 || fields[i-1] == "=>") {
				libs = append(libs, f)
			}
		}
	}
	return libs, nil
}
