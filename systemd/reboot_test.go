package systemd

import (
	"bytes"
	"context"
	"log/slog"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/nodeward/nodeward/test/fakelogind"
	"github.com/nodeward/nodeward/test/rpmostree"
	"github.com/nodeward/nodeward/test/testenv"
)

type syncBuffer struct {
	mu sync.Mutex
	b  bytes.Buffer
}

func (s *syncBuffer) Write(p []byte) (int, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.Write(p)
}

func (s *syncBuffer) String() string {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.String()
}

// fakeSystemctl writes a script recording its arguments.
func fakeSystemctl(t *testing.T) (path, record string) {
	t.Helper()
	dir := t.TempDir()
	path, record = filepath.Join(dir, "systemctl"), filepath.Join(dir, "args")
	if err := os.WriteFile(path, []byte("#!/bin/sh\necho \"$@\" > "+record+"\n"), 0o755); err != nil {
		t.Fatal(err)
	}
	return path, record
}

func TestRebootOverDBusLogsInhibitors(t *testing.T) {
	t.Parallel()
	l := fakelogind.Start(t)
	l.Hold(fakelogind.Inhibitor{What: "shutdown:sleep", Who: "backup-agent", Why: "snapshot in progress", Mode: "block", UID: 0, PID: 4242})
	l.Hold(fakelogind.Inhibitor{What: "sleep", Who: "desktop", Why: "idle", Mode: "delay"})
	var logs syncBuffer
	systemctl, record := fakeSystemctl(t)
	r := &Rebooter{BusAddress: l.Address, Systemctl: systemctl, CallTimeout: 5 * time.Second, Log: slog.New(slog.NewTextHandler(&logs, nil))}
	ins, err := r.Inhibitors(context.Background())
	if err != nil || len(ins) != 2 || ins[0].Who != "backup-agent" || ins[0].PID != 4242 {
		t.Fatalf("Inhibitors = %+v, %v", ins, err)
	}
	if err := r.Reboot(context.Background(), "nodeward: OS update"); err != nil {
		t.Fatal(err)
	}
	calls := l.Reboots()
	if len(calls) != 1 || calls[0].Interactive {
		t.Fatalf("logind Reboot calls = %+v, want one non-interactive", calls)
	}
	out := logs.String()
	if !strings.Contains(out, "backup-agent") || !strings.Contains(out, "snapshot in progress") || strings.Contains(out, "desktop") {
		t.Errorf("log should name the block inhibitor only:\n%s", out)
	}
	if _, err := os.Stat(record); err == nil {
		t.Error("systemctl fallback ran although logind accepted the reboot")
	}
}

func TestRebootFallsBackToSystemctl(t *testing.T) {
	t.Parallel()
	l := fakelogind.Start(t)
	l.FailReboot("org.freedesktop.login1.OperationInProgress")
	systemctl, record := fakeSystemctl(t)
	r := &Rebooter{BusAddress: l.Address, Systemctl: systemctl, CallTimeout: 5 * time.Second, Log: slog.New(slog.NewTextHandler(t.Output(), nil))}
	if err := r.Reboot(context.Background(), "nodeward: OS update"); err != nil {
		t.Fatal(err)
	}
	args, err := os.ReadFile(record)
	if err != nil || !strings.HasPrefix(string(args), "reboot") {
		t.Fatalf("systemctl fallback args %q, %v; want reboot", args, err)
	}
	// Bus unreachable and fallback failing: both errors reported.
	r = &Rebooter{BusAddress: "unix:path=" + filepath.Join(t.TempDir(), "none"), Systemctl: "/bin/false", CallTimeout: 5 * time.Second, Log: slog.New(slog.NewTextHandler(t.Output(), nil))}
	err = r.Reboot(context.Background(), "x")
	if err == nil || !strings.Contains(err.Error(), "logind") || !strings.Contains(err.Error(), "systemctl reboot") {
		t.Fatalf("Reboot with no bus and a failing systemctl: %v", err)
	}
}

// TestRebootFallbackInHostRoot: with a host root, the fallback runs the
// root's systemctl, chrooted. The root's "systemctl" is the static
// rpm-ostree double, which says that its state variable is unset: only
// that binary says so, so the machine's own systemctl did not run.
func TestRebootFallbackInHostRoot(t *testing.T) {
	t.Parallel()
	testenv.RequireRoot(t)
	root, double := rpmostree.HostRoot(t)
	if err := os.Rename(double, filepath.Join(filepath.Dir(double), "systemctl")); err != nil {
		t.Fatal(err)
	}
	r := &Rebooter{BusAddress: "unix:path=" + filepath.Join(t.TempDir(), "none"), HostRoot: root,
		CallTimeout: 5 * time.Second, Log: slog.New(slog.NewTextHandler(t.Output(), nil))}
	err := r.Reboot(context.Background(), "x")
	if err == nil || !strings.Contains(err.Error(), rpmostree.EnvDir+" is not set") {
		t.Fatalf("Reboot through the host root's systemctl: %v, want the root's binary's own complaint", err)
	}
}

// TestRebootAcceptedWhenTheBusGoesDown: logind takes the call and the bus
// closes before its answer, as when the shutdown has begun (seen under a
// real systemd in test/hostmode). That is an accepted reboot, not a failed
// one: no fallback to systemctl, no warning.
func TestRebootAcceptedWhenTheBusGoesDown(t *testing.T) {
	t.Parallel()
	l := fakelogind.Start(t)
	l.ShutDownOnReboot()
	var logs syncBuffer
	systemctl, record := fakeSystemctl(t)
	r := &Rebooter{BusAddress: l.Address, Systemctl: systemctl, CallTimeout: 5 * time.Second, Log: slog.New(slog.NewTextHandler(&logs, nil))}
	if err := r.Reboot(context.Background(), "nodeward: OS update"); err != nil {
		t.Fatalf("Reboot with the bus closing after the call: %v", err)
	}
	if calls := l.Reboots(); len(calls) != 1 {
		t.Fatalf("logind Reboot calls = %+v, want one", calls)
	}
	out := logs.String()
	if !strings.Contains(out, "closed before logind answered") || strings.Contains(out, "falling back") {
		t.Errorf("log should say the answer was lost, and not fall back:\n%s", out)
	}
	if _, err := os.Stat(record); err == nil {
		t.Error("systemctl fallback ran although logind took the reboot")
	}
}
