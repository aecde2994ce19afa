package sim

import (
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/nodeward/nodeward/test/cluster"
	"github.com/nodeward/nodeward/test/fakelogind"
	"github.com/nodeward/nodeward/test/rpmostree"
)

// The simulated OS of process nodes: booted Fedora CoreOS 41; the fake
// registry serves 42, the target.
const (
	procOldRef   = "ostree-unverified-registry:quay.io/fedora/fedora-coreos:41"
	procNewImage = "quay.io/fedora/fedora-coreos:42"
	// ProcTarget is the OS target a pool of process nodes rolls out.
	ProcTarget = "ostree-unverified-registry:" + procNewImage
)

// ProcNewChecksum is the OSTree commit of ProcTarget.
var ProcNewChecksum = strings.Repeat("1b", 32)

// ProcBooted is the deployment a process node boots first.
func ProcBooted() rpmostree.Deployment {
	return rpmostree.Deployment{Checksum: strings.Repeat("0a", 32), ImageRef: procOldRef,
		Digest: "sha256:" + strings.Repeat("a", 64), Kargs: []string{"rw"}}
}

// ProcImages is what the fake registry of a process node serves.
func ProcImages() map[string]rpmostree.Image {
	return map[string]rpmostree.Image{procNewImage: {Checksum: ProcNewChecksum,
		Digest: "sha256:" + strings.Repeat("c", 64), Version: "42.1"}}
}

// ProcBinaries are what a process node runs: the nodeward binary, the
// rpm-ostree double and dbus-daemon for the fake logind and systemd.
type ProcBinaries struct {
	Nodeward, RpmOstree, DBusDaemon string
}

// BuildProcBinaries finds nodeward (built once per test process as `make
// build` builds it, see cluster.NodewardBinary) and dbus-daemon, and builds
// the rpm-ostree double into dir.
func BuildProcBinaries(dir string) (ProcBinaries, error) {
	var b ProcBinaries
	dbusDaemon, err := exec.LookPath("dbus-daemon")
	if err != nil {
		return b, fmt.Errorf("dbus-daemon (Debian package dbus-daemon) is needed for the fake logind: %w", err)
	}
	b.DBusDaemon = dbusDaemon
	if b.Nodeward, err = cluster.NodewardBinary(cluster.ReleaseBuild); err != nil {
		return b, err
	}
	if b.RpmOstree, err = rpmostree.Build(dir); err != nil {
		return b, err
	}
	return b, nil
}

// Coordinator returns a `nodeward coordinator` command against kubeconfig
// (metrics off, re-plan every second, plus extra flags) that the kernel
// kills if its harness dies; the caller starts and stops it.
func (b ProcBinaries) Coordinator(kubeconfig string, extra ...string) *exec.Cmd {
	cmd := exec.Command(b.Nodeward, append([]string{"coordinator", "--kubeconfig", kubeconfig,
		"--metrics-address", "", "--resync", "1s"}, extra...)...)
	cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true, Pdeathsig: syscall.SIGKILL}
	return cmd
}

// ProcNode is one simulated node whose agent is a real `nodeward agent`
// process. Its host is the rpm-ostree double (state, boot ID and kernel
// command line in files) and, on a private D-Bus that is the agent's
// system bus, a fake logind and a fake systemd Manager (unit reloads,
// restarts and daemon-reloads are recorded, none runs). A reboot
// kills the agent with SIGKILL, as a machine going down does, waits
// RebootDelay, boots the double and starts a new agent process.
type ProcNode struct {
	Name       string
	Kubeconfig string
	Bin        ProcBinaries
	// Dir holds the agent's state dir, the double's host dir, the bus and
	// the agent's log (agent.log, appended across restarts).
	Dir         string
	RebootDelay time.Duration
	// Args are extra agent flags.
	Args []string
	// OnBoot, when set, runs after each boot of the host and before the
	// agent starts again (a test's mishap at boot: a kernel command line
	// the bootloader mangled).
	OnBoot func(boot int, double *rpmostree.Double) error

	Double *rpmostree.Double
	Logind *fakelogind.Logind
	// Systemd is the host's service manager, on Logind's bus.
	Systemd *fakelogind.Systemd

	mu          sync.Mutex
	cmd         *exec.Cmd
	exited      chan struct{}
	starts      int
	holdReboots bool
}

// NewProcNode prepares the host of node name, booted into booted, with the
// images its registry serves. Start runs the agent.
func NewProcNode(bin ProcBinaries, name, kubeconfig, dir string, booted rpmostree.Deployment,
	images map[string]rpmostree.Image) (*ProcNode, error) {
	n := &ProcNode{Name: name, Kubeconfig: kubeconfig, Bin: bin, Dir: dir}
	for _, sub := range []string{"state", "host", "bus"} {
		if err := os.MkdirAll(filepath.Join(dir, sub), 0o700); err != nil {
			return nil, err
		}
	}
	var err error
	if n.Double, err = rpmostree.Create(filepath.Join(dir, "host"), bin.RpmOstree, booted, images); err != nil {
		return nil, fmt.Errorf("node %s: create host: %w", name, err)
	}
	if n.Logind, err = fakelogind.New(bin.DBusDaemon, filepath.Join(dir, "bus")); err != nil {
		return nil, fmt.Errorf("node %s: start fake logind: %w", name, err)
	}
	if n.Systemd, err = fakelogind.NewSystemd(n.Logind.Address); err != nil {
		n.Logind.Close()
		return nil, fmt.Errorf("node %s: start fake systemd: %w", name, err)
	}
	// No probe reads this machine: every simulated node shares it, and its
	// health is not the simulated node's.
	health := "memory: {enabled: false}\ndisk: {enabled: false}\npids: {enabled: false}\n" +
		"network: {enabled: false}\nruntime: {enabled: false}\n"
	if err := os.WriteFile(filepath.Join(dir, "health.yaml"), []byte(health), 0o600); err != nil {
		return nil, err
	}
	return n, nil
}

// Start starts an agent process; it fails when one is running.
func (n *ProcNode) Start() error {
	n.mu.Lock()
	defer n.mu.Unlock()
	if n.cmd != nil {
		return fmt.Errorf("agent of %s already running", n.Name)
	}
	logFile, err := os.OpenFile(filepath.Join(n.Dir, "agent.log"), os.O_CREATE|os.O_WRONLY|os.O_APPEND, 0o600)
	if err != nil {
		return err
	}
	args := append([]string{"agent",
		"--kubeconfig", n.Kubeconfig, "--node-name", n.Name,
		"--state-dir", filepath.Join(n.Dir, "state"), "--config", filepath.Join(n.Dir, "health.yaml"),
		"--metrics-address", "",
		"--rpm-ostree", n.Bin.RpmOstree, "--rpm-ostree-env", rpmostree.EnvDir + "=" + n.Double.Dir,
		"--image-transport", "unverified-registry",
		"--boot-id-file", n.Double.BootIDPath(), "--cmdline-file", n.Double.CmdlinePath(),
		"--update-poll-interval", "300ms",
	}, n.Args...)
	cmd := exec.Command(n.Bin.Nodeward, args...)
	cmd.Env = append(os.Environ(), "DBUS_SYSTEM_BUS_ADDRESS="+n.Logind.Address, "NOTIFY_SOCKET=")
	cmd.Stdout, cmd.Stderr = logFile, logFile
	// Its own process group: a Ctrl-C of the harness reaches the harness,
	// which then kills every agent itself.
	// If the harness dies, the kernel kills the agent (Pdeathsig).
	cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true, Pdeathsig: syscall.SIGKILL}
	if err := cmd.Start(); err != nil {
		logFile.Close()
		return fmt.Errorf("start agent of %s: %w", n.Name, err)
	}
	exited := make(chan struct{})
	go func() {
		_ = cmd.Wait()
		logFile.Close()
		close(exited)
	}()
	n.cmd, n.exited = cmd, exited
	n.starts++
	return nil
}

// Kill sends SIGKILL to the agent process and to every process it started
// (an rpm-ostree mid-transaction dies with the machine too) and waits for
// the agent to end.
func (n *ProcNode) Kill() {
	n.mu.Lock()
	cmd, exited := n.cmd, n.exited
	n.cmd = nil
	n.mu.Unlock()
	if cmd == nil {
		return
	}
	_ = syscall.Kill(-cmd.Process.Pid, syscall.SIGKILL)
	<-exited
}

// Pid is the running agent process's ID, 0 when none runs.
func (n *ProcNode) Pid() int {
	n.mu.Lock()
	defer n.mu.Unlock()
	if n.cmd == nil {
		return 0
	}
	return n.cmd.Process.Pid
}

// Running reports whether an agent process runs (it may have exited on its
// own: that is a crash the log explains).
func (n *ProcNode) Running() bool {
	n.mu.Lock()
	defer n.mu.Unlock()
	if n.cmd == nil {
		return false
	}
	select {
	case <-n.exited:
		return false
	default:
		return true
	}
}

// Starts counts agent process starts.
func (n *ProcNode) Starts() int {
	n.mu.Lock()
	defer n.mu.Unlock()
	return n.starts
}

// HoldReboots keeps the machine up while hold is true: a reboot asked for
// meanwhile happens when the hold ends.
func (n *ProcNode) HoldReboots(hold bool) {
	n.mu.Lock()
	defer n.mu.Unlock()
	n.holdReboots = hold
}

// Boots is how many times the host booted since it was created.
func (n *ProcNode) Boots() (int, error) {
	s, err := rpmostree.Load(n.Double.Dir)
	if err != nil {
		return 0, err
	}
	return s.Boots, nil
}

// RunReboots serves the machine until ctx ends. A reboot is asked for
// either by rpm-ostree finalize-deployment (it reboots by itself) or by a
// logind Reboot call; either takes the machine down. The double's state is
// a file the agent's rpm-ostree writes, so it is read every 100 ms.
func (n *ProcNode) RunReboots(ctx context.Context) error {
	tick := time.NewTicker(100 * time.Millisecond)
	defer tick.Stop()
	logindAsked := false
	for {
		select {
		case <-ctx.Done():
			return nil
		case <-n.Logind.Rebooted():
			logindAsked = true
		case <-tick.C:
		}
		n.mu.Lock()
		hold := n.holdReboots
		n.mu.Unlock()
		s, err := rpmostree.Load(n.Double.Dir)
		if err != nil {
			return fmt.Errorf("node %s: %w", n.Name, err)
		}
		if hold || (!logindAsked && !s.RebootRequested) {
			continue
		}
		logindAsked = false
		n.Kill()
		// A logind request the agent made before it died goes down
		// with the machine: finalize-deployment reboots by itself, and
		// an agent that also asked logind (as it does, at once) asked
		// for this reboot, not for another after it.
		select {
		case <-n.Logind.Rebooted():
		default:
		}
		select {
		case <-ctx.Done():
			return nil
		case <-time.After(n.RebootDelay):
		}
		if err := n.Double.BootHost(); err != nil {
			return fmt.Errorf("node %s: boot: %w", n.Name, err)
		}
		if n.OnBoot != nil {
			boots, err := n.Boots()
			if err == nil {
				err = n.OnBoot(boots, n.Double)
			}
			if err != nil {
				return fmt.Errorf("node %s: after boot: %w", n.Name, err)
			}
		}
		if err := n.Start(); err != nil {
			return err
		}
	}
}

// RunMachines serves the reboots of every node (RunReboots) until the test
// ends, then kills their agents and stops their logind, logging the tail
// of each agent's log when the test failed.
func RunMachines(t testing.TB, nodes map[string]*ProcNode) {
	ctx, cancel := context.WithCancel(context.Background())
	var wg sync.WaitGroup
	for name, n := range nodes {
		wg.Go(func() {
			if err := n.RunReboots(ctx); err != nil {
				t.Errorf("machine %s: %v", name, err)
			}
		})
	}
	t.Cleanup(func() {
		cancel()
		wg.Wait()
		for name, n := range nodes {
			if t.Failed() {
				t.Logf("agent log of %s (tail):\n%s", name, n.LogTail(4000))
			}
			n.Close()
		}
	})
}

// Close kills the agent and stops the fake systemd and logind.
func (n *ProcNode) Close() {
	n.Kill()
	if n.Systemd != nil {
		n.Systemd.Close()
	}
	if n.Logind != nil {
		n.Logind.Close()
	}
}

// LogTail returns the last bytes of the agent's log, for failure messages.
func (n *ProcNode) LogTail(bytes int64) string {
	f, err := os.Open(filepath.Join(n.Dir, "agent.log"))
	if err != nil {
		return err.Error()
	}
	defer f.Close()
	st, err := f.Stat()
	if err != nil {
		return err.Error()
	}
	off := max(st.Size()-bytes, 0)
	buf := make([]byte, st.Size()-off)
	if _, err := f.ReadAt(buf, off); err != nil && !errors.Is(err, io.EOF) {
		return err.Error()
	}
	return string(buf)
}
