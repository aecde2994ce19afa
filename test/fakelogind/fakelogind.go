// Package fakelogind runs a private dbus-daemon and exports on it a fake
// org.freedesktop.login1.Manager that records Reboot calls and can hold
// inhibitors, so that nodeward's reboot path runs over real D-Bus in tests;
// beside it, on the same bus, a fake org.freedesktop.systemd1.Manager
// (fakesystemd.go) takes unit reloads, restarts and daemon-reloads.
package fakelogind

import (
	"bufio"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/godbus/dbus/v5"

	"github.com/nodeward/nodeward/test/testenv"
)

const busConfig = `<!DOCTYPE busconfig PUBLIC "-//freedesktop//DTD D-Bus Bus Configuration 1.0//EN"
 "http://www.freedesktop.org/standards/dbus/1.0/busconfig.dtd">
<busconfig>
  <type>custom</type>
  <listen>unix:path=%s</listen>
  <auth>EXTERNAL</auth>
  <policy context="default">
    <allow user="*"/>
    <allow own="*"/>
    <allow send_destination="*"/>
    <allow receive_sender="*"/>
  </policy>
</busconfig>
`

// Inhibitor mirrors one entry of ListInhibitors, a(ssssuu).
type Inhibitor struct {
	What, Who, Why, Mode string
	UID, PID             uint32
}

// RebootCall is one recorded Manager.Reboot.
type RebootCall struct{ Interactive bool }

// Logind is the fake service and its bus.
type Logind struct {
	// Address is the private bus address to connect to.
	Address string

	mu         sync.Mutex
	reboots    []RebootCall
	inhibitors []Inhibitor
	failReboot string // D-Bus error name to answer Reboot with
	// shutDownOnReboot: Reboot stops the bus before its answer goes out.
	shutDownOnReboot bool
	conn             *dbus.Conn
	daemon           *exec.Cmd
	rebooted         chan struct{}
}

type manager struct{ l *Logind }

// Reboot records the call, or fails as configured.
func (m manager) Reboot(interactive bool) *dbus.Error {
	m.l.mu.Lock()
	defer m.l.mu.Unlock()
	if m.l.failReboot != "" {
		return dbus.NewError(m.l.failReboot, []any{"refused by the fake"})
	}
	m.l.reboots = append(m.l.reboots, RebootCall{Interactive: interactive})
	select {
	case m.l.rebooted <- struct{}{}:
	default:
	}
	if m.l.shutDownOnReboot {
		// The answer is sent after this returns, on a bus that is gone.
		_ = m.l.daemon.Process.Kill()
		_ = m.l.daemon.Wait()
	}
	return nil
}

// ListInhibitors returns the held inhibitors.
func (m manager) ListInhibitors() ([]Inhibitor, *dbus.Error) {
	m.l.mu.Lock()
	defer m.l.mu.Unlock()
	return append([]Inhibitor{}, m.l.inhibitors...), nil
}

// Start runs dbus-daemon and the fake; both stop at test cleanup. It skips
// (fails in CI) without dbus-daemon.
func Start(t testing.TB) *Logind {
	t.Helper()
	bin := testenv.RequireBinary(t, "dbus-daemon")
	l, err := New(bin, t.TempDir())
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(l.Close)
	return l
}

// New runs the dbus-daemon binary on a socket in dir and exports the fake
// on it. Close stops both.
func New(dbusDaemon, dir string) (*Logind, error) {
	cfg := filepath.Join(dir, "bus.conf")
	if err := os.WriteFile(cfg, fmt.Appendf(nil, busConfig, filepath.Join(dir, "bus")), 0o600); err != nil {
		return nil, err
	}
	cmd := exec.Command(dbusDaemon, "--config-file="+cfg, "--nofork", "--nopidfile", "--print-address=1")
	stdout, err := cmd.StdoutPipe()
	if err != nil {
		return nil, err
	}
	// dbus-daemon warns about fd limits it may not raise without root;
	// keep its messages beside its socket.
	errLog, err := os.Create(filepath.Join(dir, "dbus-daemon.log"))
	if err != nil {
		return nil, err
	}
	defer errLog.Close()
	cmd.Stderr = errLog
	cmd.SysProcAttr = &syscall.SysProcAttr{Pdeathsig: syscall.SIGKILL} // no bus outlives its harness
	if err := cmd.Start(); err != nil {
		return nil, fmt.Errorf("starting dbus-daemon: %w", err)
	}
	l := &Logind{daemon: cmd, rebooted: make(chan struct{}, 1)}
	addrCh := make(chan string, 1)
	go func() {
		line, _ := bufio.NewReader(stdout).ReadString('\n')
		addrCh <- strings.TrimSpace(line)
	}()
	select {
	case l.Address = <-addrCh:
	case <-time.After(10 * time.Second):
		l.Close()
		return nil, fmt.Errorf("dbus-daemon printed no address within 10s")
	}
	if l.Address == "" {
		l.Close()
		return nil, fmt.Errorf("dbus-daemon printed an empty address")
	}
	conn, err := dbus.Connect(l.Address)
	if err != nil {
		l.Close()
		return nil, fmt.Errorf("connecting to the private bus: %w", err)
	}
	l.conn = conn
	if err := conn.Export(manager{l}, "/org/freedesktop/login1", "org.freedesktop.login1.Manager"); err != nil {
		l.Close()
		return nil, err
	}
	reply, err := conn.RequestName("org.freedesktop.login1", dbus.NameFlagDoNotQueue)
	if err != nil || reply != dbus.RequestNameReplyPrimaryOwner {
		l.Close()
		return nil, fmt.Errorf("owning org.freedesktop.login1 on the private bus: reply %v, %v", reply, err)
	}
	return l, nil
}

// Close disconnects the fake and stops its dbus-daemon.
func (l *Logind) Close() {
	if l.conn != nil {
		l.conn.Close()
	}
	_ = l.daemon.Process.Kill()
	_ = l.daemon.Wait()
}

// Rebooted is signalled after each recorded Reboot call.
func (l *Logind) Rebooted() <-chan struct{} { return l.rebooted }

// Hold adds an inhibitor, as `systemd-inhibit` would.
func (l *Logind) Hold(in Inhibitor) {
	l.mu.Lock()
	defer l.mu.Unlock()
	l.inhibitors = append(l.inhibitors, in)
}

// FailReboot makes Reboot answer with the D-Bus error name (empty: succeed).
func (l *Logind) FailReboot(errorName string) {
	l.mu.Lock()
	defer l.mu.Unlock()
	l.failReboot = errorName
}

// ShutDownOnReboot makes Reboot record the call and then stop the bus
// before its answer goes out, as a system whose shutdown has begun does:
// the caller's connection closes instead of an answer coming.
func (l *Logind) ShutDownOnReboot() {
	l.mu.Lock()
	defer l.mu.Unlock()
	l.shutDownOnReboot = true
}

// Reboots returns the recorded Reboot calls.
func (l *Logind) Reboots() []RebootCall {
	l.mu.Lock()
	defer l.mu.Unlock()
	return append([]RebootCall{}, l.reboots...)
}
