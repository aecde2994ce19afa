package hostmode

import (
	"bufio"
	"bytes"
	"crypto/rand"
	"encoding/hex"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"time"

	"sigs.k8s.io/yaml"

	"github.com/nodeward/nodeward/test/rpmostree"
)

// Paths inside the container: those of manifests/host/README.md, plus the
// rpm-ostree double and its state.
const (
	BinaryPath     = "/usr/local/bin/nodeward"
	UnitPath       = "/etc/systemd/system/nodeward.service"
	DropInPath     = "/etc/systemd/system/nodeward.service.d/50-hostmode-test.conf"
	ConfigPath     = "/etc/nodeward/config.yaml"
	KubeconfigPath = "/etc/nodeward/kubeconfig"
	StateDir       = "/var/lib/nodeward"
	// TextfileDir is node_exporter's textfile directory of the example
	// configuration; a host running node_exporter has it.
	TextfileDir = "/var/lib/node_exporter/textfile_collector"
	// RpmOstreePath is where the double is installed; the agent runs it
	// through --rpm-ostree.
	RpmOstreePath = "/usr/local/bin/rpm-ostree"
	// DoubleDir holds the double's state: under /var/lib, so that it
	// persists across boots as /sysroot and /boot do.
	DoubleDir = "/var/lib/rpm-ostree-double"
	// KernelBootIDPath is the kernel's boot ID, new at every container boot.
	KernelBootIDPath = "/proc/sys/kernel/random/boot_id"
)

// Install is nodeward installed on a host root as manifests/host/README.md
// says, with the rpm-ostree double as the OS.
type Install struct {
	Root     string
	NodeName string // the host name; the unit's NODE_NAME is %H
	// Nodeward and RpmOstree are the binaries on the test host.
	Nodeward, RpmOstree string
	// Unit is the project's systemd/nodeward.service, installed verbatim.
	Unit []byte
	// DropIn is the test's drop-in (see DropIn); none when empty.
	DropIn string
	// Config is /etc/nodeward/config.yaml, Kubeconfig /etc/nodeward/kubeconfig.
	Config, Kubeconfig []byte
	// Booted is the deployment the host runs; Images what its registry
	// serves.
	Booted rpmostree.Deployment
	Images map[string]rpmostree.Image
	// Enable links the unit into multi-user.target.wants, as
	// `systemctl enable` does: it starts at every boot.
	Enable bool
}

// Apply writes everything into Root and returns the double, whose state
// the test reads and changes from the host (Root + DoubleDir).
func (in Install) Apply() (*rpmostree.Double, error) {
	at := func(p string) string { return filepath.Join(in.Root, p) }
	copies := []struct {
		from, to string
		mode     os.FileMode
	}{{in.Nodeward, BinaryPath, 0o755}, {in.RpmOstree, RpmOstreePath, 0o755}}
	for _, c := range copies {
		data, err := os.ReadFile(c.from)
		if err != nil {
			return nil, err
		}
		if err := writeFile(at(c.to), data, c.mode); err != nil {
			return nil, err
		}
	}
	machineID := make([]byte, 16)
	if _, err := rand.Read(machineID); err != nil {
		return nil, err
	}
	files := []struct {
		path string
		data []byte
		mode os.FileMode
	}{
		{"/etc/hostname", []byte(in.NodeName + "\n"), 0o644},
		// A machine ID of its own, stable across boots: the journal of the
		// previous boot is found by it.
		{"/etc/machine-id", []byte(hex.EncodeToString(machineID) + "\n"), 0o444},
		{UnitPath, in.Unit, 0o644},
		{ConfigPath, in.Config, 0o644},
		{KubeconfigPath, in.Kubeconfig, 0o600},
	}
	if in.DropIn != "" {
		files = append(files, struct {
			path string
			data []byte
			mode os.FileMode
		}{DropInPath, []byte(in.DropIn), 0o644})
	}
	for _, f := range files {
		if err := writeFile(at(f.path), f.data, f.mode); err != nil {
			return nil, err
		}
	}
	if err := os.MkdirAll(at(TextfileDir), 0o755); err != nil {
		return nil, err
	}
	if in.Enable {
		wants := at("/etc/systemd/system/multi-user.target.wants")
		if err := os.MkdirAll(wants, 0o755); err != nil {
			return nil, err
		}
		if err := os.Symlink(UnitPath, filepath.Join(wants, "nodeward.service")); err != nil {
			return nil, err
		}
	}
	if err := os.MkdirAll(at(DoubleDir), 0o700); err != nil {
		return nil, err
	}
	d, err := rpmostree.Create(at(DoubleDir), at(RpmOstreePath), in.Booted, in.Images)
	if err != nil {
		return nil, err
	}
	return d, d.FollowKernel(KernelBootIDPath)
}

func writeFile(path string, data []byte, mode os.FileMode) error {
	if err := os.MkdirAll(filepath.Dir(path), 0o755); err != nil {
		return err
	}
	if err := os.WriteFile(path, data, mode); err != nil {
		return err
	}
	return os.Chmod(path, mode)
}

// DropInOptions are what a test changes in the project's unit.
type DropInOptions struct {
	// Watchdog replaces the unit's WatchdogSec (zero keeps it).
	Watchdog time.Duration
	// Args are appended to the agent's command line, after the flags
	// that point it at the double.
	Args []string
	// Directives are further [Service] lines (ReadWritePaths=/etc for an
	// agent that writes a rendered MachineConfig's files, say).
	Directives []string
}

// DropIn writes the test's drop-in for unit: the unit's own ExecStart
// plus the flags that make the double the OS (--rpm-ostree and its state
// dir; --cmdline-file, since the container's /proc/cmdline is the test
// host's), and a shorter watchdog when asked. Every other directive stays
// the unit's.
func DropIn(unit []byte, o DropInOptions) (string, error) {
	exec, err := unitExecStart(unit)
	if err != nil {
		return "", err
	}
	args := append([]string{exec,
		"--rpm-ostree=" + RpmOstreePath,
		"--rpm-ostree-env=" + rpmostree.EnvDir + "=" + DoubleDir,
		"--cmdline-file=" + DoubleDir + "/cmdline",
	}, o.Args...)
	var b strings.Builder
	b.WriteString("# test/hostmode: the rpm-ostree double is the OS; everything else is the unit's.\n[Service]\n")
	if o.Watchdog > 0 {
		fmt.Fprintf(&b, "WatchdogSec=%s\n", o.Watchdog)
	}
	for _, d := range o.Directives {
		b.WriteString(d + "\n")
	}
	fmt.Fprintf(&b, "ExecStart=\nExecStart=%s\n", strings.Join(args, " "))
	return b.String(), nil
}

// unitExecStart is the ExecStart= of a unit file's [Service] section.
func unitExecStart(unit []byte) (string, error) {
	section := ""
	sc := bufio.NewScanner(bytes.NewReader(unit))
	for sc.Scan() {
		line := strings.TrimSpace(sc.Text())
		if strings.HasPrefix(line, "[") {
			section = line
			continue
		}
		if v, ok := strings.CutPrefix(line, "ExecStart="); ok && section == "[Service]" {
			return v, nil
		}
	}
	return "", fmt.Errorf("the unit has no ExecStart= in [Service]")
}

// UnitDirectives lists a unit file's directives of [Service] as
// key=value lines, in order (comments and blank lines dropped).
func UnitDirectives(unit []byte) []string {
	var out []string
	section := ""
	sc := bufio.NewScanner(bytes.NewReader(unit))
	for sc.Scan() {
		line := strings.TrimSpace(sc.Text())
		switch {
		case line == "" || strings.HasPrefix(line, "#") || strings.HasPrefix(line, ";"):
		case strings.HasPrefix(line, "["):
			section = line
		case section == "[Service]":
			out = append(out, line)
		}
	}
	return out
}

// HostConfig is manifests/host/config.yaml with what a test host needs
// changed: the metrics address (a free port: the container shares the
// test host's network) and the runtime probe off, since no CRI socket
// exists in the container (its condition would be True and keep the node
// out of service, so an update would never end). The memory probe stays on
// (the hardening test checks its PSI trigger is armed) with thresholds a
// busy test host does not reach: the container reads the real host's
// memory stall, and a CI run on two cores stalled past the shipped 7.5 %
// (TestKillMidDrain's node was held under NodewardMemoryPressure's quiet
// period, and never granted).
func HostConfig(example []byte, metricsAddress string) ([]byte, error) {
	var cfg map[string]any
	if err := yaml.Unmarshal(example, &cfg); err != nil {
		return nil, fmt.Errorf("manifests/host/config.yaml: %w", err)
	}
	cfg["metricsAddress"] = metricsAddress
	runtime, _ := cfg["runtime"].(map[string]any)
	if runtime == nil {
		runtime = map[string]any{}
	}
	runtime["enabled"] = false
	cfg["runtime"] = runtime
	memory, _ := cfg["memory"].(map[string]any)
	if memory == nil {
		memory = map[string]any{}
	}
	memory["trigger"] = "full 900000 1000000" // 90 % of a 1 s window
	memory["psiFullAvg10Percent"] = 90
	cfg["memory"] = memory
	return yaml.Marshal(cfg)
}
