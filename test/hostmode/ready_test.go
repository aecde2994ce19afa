package hostmode_test

import (
	"fmt"
	"net/http"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/nodeward/nodeward/test/hostmode"
)

// readyWithin is "READY within seconds": from the agent's start to
// READY=1, as systemd timestamps them.
const readyWithin = 10 * time.Second

// TestReady: the agent started by its unit at boot reaches READY=1 within
// seconds and stays active, pinging the watchdog, with no restart over more
// than three watchdog periods; the same with --updates=false (node health
// only), whose READY=1 the unit used to wait for in vain.
func TestReady(t *testing.T) {
	h := newHost(t, hostOptions{prefix: "hm-ready"})
	t.Run("updates", func(t *testing.T) {
		h.t = t
		h.assertSteady(h.waitActive(time.Minute))
	})
	t.Run("health-only", func(t *testing.T) {
		h.t = t
		dropIn, err := hostmode.DropIn(h.unit, hostmode.DropInOptions{Watchdog: watchdogPeriod,
			Args: []string{"--update-poll-interval=1s", "--updates=false"}})
		if err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(filepath.Join(h.root, hostmode.DropInPath), []byte(dropIn), 0o644); err != nil {
			t.Fatal(err)
		}
		h.exec("systemctl", "daemon-reload")
		h.exec("systemctl", "restart", "nodeward.service")
		props := h.waitActive(time.Minute)
		if !strings.Contains(h.exec("systemctl", "show", "-p", "ExecStart", "nodeward.service"), "--updates=false") {
			t.Fatal("the unit does not run with --updates=false")
		}
		h.assertSteady(props)
	})
}

// assertSteady checks an active agent: READY=1 came within seconds,
// /readyz and /livez answer 200, and over 3.5 watchdog periods the same
// process stays active, systemd receives its WATCHDOG=1 and restarts
// nothing.
func (h *host) assertSteady(props map[string]string) {
	t := h.t
	t.Helper()
	latency := readyLatency(props)
	t.Logf("READY=1 %s after the agent's start; status %q", latency.Round(time.Millisecond), props["StatusText"])
	if latency <= 0 || latency > readyWithin {
		t.Errorf("READY=1 after %s, want within %s", latency, readyWithin)
	}
	if props["SubState"] != "running" || props["NRestarts"] != "0" {
		t.Errorf("at READY: %s/%s with %s restarts, want active/running with 0", props["ActiveState"], props["SubState"], props["NRestarts"])
	}
	for _, path := range []string{"/readyz", "/livez"} {
		h.waitFor(10*time.Second, path+" 200", func() (bool, error) {
			code, body, err := h.get(path)
			return code == http.StatusOK, fmt.Errorf("%s: %d %q (%v)", path, code, body, err)
		})
	}
	if got := h.show("WatchdogUSec")["WatchdogUSec"]; got != watchdogPeriod.String() {
		t.Fatalf("WatchdogUSec=%s, want the drop-in's %s", got, watchdogPeriod)
	}
	pings := func() int64 {
		v, _ := strconv.ParseInt(h.show("WatchdogTimestampMonotonic")["WatchdogTimestampMonotonic"], 10, 64)
		return v
	}
	first := pings()
	time.Sleep(watchdogPeriod*7/2 + time.Second)
	after := h.show("ActiveState", "SubState", "NRestarts", "MainPID", "InvocationID")
	if after["ActiveState"] != "active" || after["SubState"] != "running" || after["NRestarts"] != "0" ||
		after["MainPID"] != props["MainPID"] || after["InvocationID"] != props["InvocationID"] {
		t.Fatalf("after %s: %v, want the same process (MainPID %s) active/running with 0 restarts", watchdogPeriod*7/2, after, props["MainPID"])
	}
	if last := pings(); last <= first {
		t.Errorf("no WATCHDOG=1 received in %s (last ping at monotonic %d µs)", watchdogPeriod*7/2, last)
	}
	if j := h.journal("0"); strings.Contains(j, "Watchdog timeout") {
		t.Errorf("the watchdog fired:\n%s", j)
	}
}
