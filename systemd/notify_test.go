package systemd

import (
	"net"
	"os"
	"path/filepath"
	"strconv"
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
	for _, msg := range []string{"READY=1", "STATUS=draining node-1", "STOPPING=1"} {
		if err := n.Notify(msg); err != nil {
			t.Fatal(err)
		}
	}
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

func TestWatchdogInterval(t *testing.T) {
	t.Setenv("WATCHDOG_USEC", "60000000")
	t.Setenv("WATCHDOG_PID", strconv.Itoa(os.Getpid()))
	if got, err := WatchdogInterval(); err != nil || got != time.Minute {
		t.Fatalf("WatchdogInterval = %s, %v; want 1m0s", got, err)
	}
	t.Setenv("WATCHDOG_PID", strconv.Itoa(os.Getpid()+1)) // meant for another process
	if got, err := WatchdogInterval(); err != nil || got != 0 {
		t.Fatalf("WatchdogInterval for another PID = %s, %v; want 0", got, err)
	}
	t.Setenv("WATCHDOG_USEC", "")
	if got, err := WatchdogInterval(); err != nil || got != 0 {
		t.Fatalf("WatchdogInterval without the watchdog = %s, %v; want 0", got, err)
	}
}
