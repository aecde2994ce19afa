package systemd

import (
	"context"
	"net"
	"os"
	"path/filepath"
	"strconv"
	"syscall"
	"testing"
	"time"
)

// listenNotify opens a unixgram socket as systemd does and points
// NOTIFY_SOCKET at it.
func listenNotify(t *testing.T) *net.UnixConn {
	t.Helper()
	path := filepath.Join(t.TempDir(), "notify.sock")
	conn, err := net.ListenUnixgram("unixgram", &net.UnixAddr{Name: path, Net: "unixgram"})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { conn.Close() })
	t.Setenv("NOTIFY_SOCKET", path)
	return conn
}

func receive(t *testing.T, conn *net.UnixConn, timeout time.Duration) string {
	t.Helper()
	buf := make([]byte, 4096)
	if err := conn.SetReadDeadline(time.Now().Add(timeout)); err != nil {
		t.Fatal(err)
	}
	n, err := conn.Read(buf)
	if err != nil {
		t.Fatalf("no sd_notify message within %s: %v", timeout, err)
	}
	return string(buf[:n])
}

func TestNotifyMessages(t *testing.T) {
	conn := listenNotify(t)
	n := &Notifier{}
	n.Ready()
	n.Status("draining\nnode-1")
	n.Stopping()
	for _, want := range []string{"READY=1", "STATUS=draining node-1", "STOPPING=1"} {
		if got := receive(t, conn, 5*time.Second); got != want {
			t.Errorf("got %q, want %q", got, want)
		}
	}
}

func TestNotifyWithoutSocketIsQuiet(t *testing.T) {
	t.Setenv("NOTIFY_SOCKET", "")
	if err := (&Notifier{}).Notify("READY=1"); err != nil {
		t.Fatalf("Notify without NOTIFY_SOCKET: %v", err)
	}
}

func TestWatchdogAtHalfInterval(t *testing.T) {
	conn := listenNotify(t)
	t.Setenv("WATCHDOG_USEC", "200000")
	t.Setenv("WATCHDOG_PID", strconv.Itoa(os.Getpid()))
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error)
	alive := make(chan bool, 1)
	alive <- true
	isAlive := func() bool {
		select {
		case v := <-alive:
			alive <- v
			return v
		default:
			return true
		}
	}
	go func() { done <- (&Notifier{}).RunWatchdog(ctx, isAlive) }()
	start := time.Now()
	for range 3 {
		if got := receive(t, conn, 2*time.Second); got != "WATCHDOG=1" {
			t.Fatalf("got %q, want WATCHDOG=1", got)
		}
	}
	// Three pings at 100 ms spacing: the first at once, the third after
	// about 200 ms; at the full interval it would be 400 ms.
	if el := time.Since(start); el >= 350*time.Millisecond {
		t.Errorf("3 pings took %s; want them at half of the 200ms watchdog interval", el)
	}
	<-alive
	alive <- false
	// Drain a ping already in flight, then expect silence.
	_ = conn.SetReadDeadline(time.Now().Add(150 * time.Millisecond))
	buf := make([]byte, 64)
	_, _ = conn.Read(buf)
	if err := conn.SetReadDeadline(time.Now().Add(400 * time.Millisecond)); err != nil {
		t.Fatal(err)
	}
	if n, err := conn.Read(buf); err == nil {
		t.Errorf("watchdog pinged %q while the agent was not alive", buf[:n])
	}
	cancel()
	if err := <-done; err != nil {
		t.Fatal(err)
	}
}

func TestShutdownWaitsForCriticalStep(t *testing.T) {
	conn := listenNotify(t)
	s := &Shutdown{MaxWait: 30 * time.Second, Notifier: &Notifier{}}
	ctx, cancel := s.Context(context.Background())
	defer cancel()
	running, release, stepDone := make(chan struct{}), make(chan struct{}), make(chan error)
	go func() {
		stepDone <- s.Critical(ctx, func(stepCtx context.Context) error {
			close(running)
			<-release
			return stepCtx.Err() // the shutdown must not have cancelled it
		})
	}()
	<-running
	if err := syscall.Kill(os.Getpid(), syscall.SIGTERM); err != nil {
		t.Fatal(err)
	}
	if got := receive(t, conn, 5*time.Second); got != "STOPPING=1" {
		t.Fatalf("got %q, want STOPPING=1", got)
	}
	if ctx.Err() != nil {
		t.Fatal("agent context cancelled while the finalize step was in flight")
	}
	close(release)
	if err := <-stepDone; err != nil {
		t.Fatalf("critical step saw cancellation: %v", err)
	}
	select {
	case <-ctx.Done():
	case <-time.After(5 * time.Second):
		t.Fatal("agent context not cancelled after the critical step ended")
	}
}

func TestShutdownWaitIsBounded(t *testing.T) {
	t.Parallel()
	s := &Shutdown{}
	release := make(chan struct{})
	running := make(chan struct{})
	go func() {
		_ = s.Critical(context.Background(), func(context.Context) error { close(running); <-release; return nil })
	}()
	<-running
	if s.Wait(50 * time.Millisecond) {
		t.Fatal("Wait reported the step finished while it still runs")
	}
	close(release)
	if !s.Wait(5 * time.Second) {
		t.Fatal("Wait timed out after the step ended")
	}
}
