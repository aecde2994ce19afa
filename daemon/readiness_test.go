package daemon

import (
	"context"
	"net"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/nodeward/nodeward/systemd"
)

// TestReadinessNotifiesOverARealSocket checks /readyz and that READY=1 and
// STATUS= reach a unixgram NOTIFY_SOCKET, as systemd would read them.
func TestReadinessNotifiesOverARealSocket(t *testing.T) {
	sock := filepath.Join(t.TempDir(), "notify.sock")
	conn, err := net.ListenUnixgram("unixgram", &net.UnixAddr{Name: sock, Net: "unixgram"})
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close()
	t.Setenv("NOTIFY_SOCKET", sock)

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
