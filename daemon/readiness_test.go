package daemon

import (
	"context"
	"io"
	"log/slog"
	"net"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/nodeward/nodeward/systemd"
)

// listenNotify is a unixgram NOTIFY_SOCKET, as systemd listens on.
func listenNotify(t *testing.T) (*net.UnixConn, string) {
	t.Helper()
	sock := filepath.Join(t.TempDir(), "notify.sock")
	conn, err := net.ListenUnixgram("unixgram", &net.UnixAddr{Name: sock, Net: "unixgram"})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { conn.Close() })
	t.Setenv("NOTIFY_SOCKET", sock)
	return conn, sock
}

// TestReadinessNotifiesOverARealSocket checks /readyz and that READY=1 and
// STATUS= reach a unixgram NOTIFY_SOCKET, as systemd would read them.
func TestReadinessNotifiesOverARealSocket(t *testing.T) {
	conn, sock := listenNotify(t)

	synced := make(chan struct{})
	r := &Readiness{Notifier: &systemd.Notifier{}}
	r.Add("update", SyncedCheck(synced))

	rec := httptest.NewRecorder()
	r.ServeHTTP(rec, httptest.NewRequest(http.MethodGet, "/readyz", nil))
	if rec.Code != http.StatusServiceUnavailable || !strings.Contains(rec.Body.String(), "update: first sync not done") {
		t.Fatalf("before the sync: %d %q", rec.Code, rec.Body.String())
	}
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	done := make(chan struct{})
	go func() { defer close(done); r.Run(ctx, 10*time.Millisecond) }()
	close(synced)
	<-done
	r.Status("update: Draining (target os-2)")

	var got []string
	buf := make([]byte, 1024)
	for len(got) < 2 {
		_ = conn.SetReadDeadline(time.Now().Add(5 * time.Second))
		n, err := conn.Read(buf)
		if err != nil {
			t.Fatalf("read notify socket after %v: %v", got, err)
		}
		got = append(got, string(buf[:n]))
	}
	if got[0] != "READY=1" || got[1] != "STATUS=update: Draining (target os-2)" {
		t.Fatalf("notifications %q", got)
	}
	rec = httptest.NewRecorder()
	r.ServeHTTP(rec, httptest.NewRequest(http.MethodGet, "/readyz", nil))
	if rec.Code != http.StatusOK {
		t.Fatalf("after the sync: %d %q", rec.Code, rec.Body.String())
	}
	_ = os.Remove(sock)
}

// TestWatchdogPingsOnlyWhileLoopsTurn: WATCHDOG=1 reaches a real unixgram
// NOTIFY_SOCKET at half the interval while the loops are alive, and stops
// as soon as one is stuck, so that systemd's restart means a wedged loop.
func TestWatchdogPingsOnlyWhileLoopsTurn(t *testing.T) {
	conn, _ := listenNotify(t)

	var mu sync.Mutex
	now := time.Unix(1_700_000_000, 0)
	clock := func() time.Time { mu.Lock(); defer mu.Unlock(); return now }
	a := &Agent{cfg: Config{WatchdogInterval: 200 * time.Millisecond, Log: slog.New(slog.NewTextHandler(io.Discard, nil))},
		readiness: &Readiness{Notifier: &systemd.Notifier{}}, liveness: NewLiveness(clock)}
	beat := a.liveness.Register("update", time.Minute, time.Hour)
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan struct{})
	go func() { defer close(done); a.petWatchdog(ctx) }()
	defer func() { cancel(); <-done }()

	buf := make([]byte, 64)
	start := time.Now()
	for range 3 {
		_ = conn.SetReadDeadline(time.Now().Add(2 * time.Second))
		n, err := conn.Read(buf)
		if err != nil || string(buf[:n]) != "WATCHDOG=1" {
			t.Fatalf("got %q, %v; want WATCHDOG=1", buf[:n], err)
		}
	}
	// The first ping at once, the third after two half-intervals (200 ms);
	// at the full interval it would be 400 ms.
	if el := time.Since(start); el >= 350*time.Millisecond {
		t.Errorf("3 pings took %s; want them at half of the 200ms interval", el)
	}
	beat(false)
	mu.Lock()
	now = now.Add(2 * time.Minute) // the update loop has not turned since
	mu.Unlock()
	// Drain a ping already in flight, then expect silence.
	_ = conn.SetReadDeadline(time.Now().Add(150 * time.Millisecond))
	_, _ = conn.Read(buf)
	_ = conn.SetReadDeadline(time.Now().Add(400 * time.Millisecond))
	if n, err := conn.Read(buf); err == nil {
		t.Fatalf("watchdog pinged %q while the update loop was stuck", buf[:n])
	}
	if ok, why := a.Alive(); ok || !strings.Contains(why, "update") {
		t.Fatalf("Alive = %v %q; want the update loop named", ok, why)
	}
}
