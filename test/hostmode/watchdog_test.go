package hostmode_test

import (
	"context"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	v1alpha1 "github.com/nodeward/nodeward/api/v1alpha1"
	"github.com/nodeward/nodeward/test/hostmode"
	"github.com/nodeward/nodeward/test/testenv"
)

// wedgeFile is the agent's --debug-wedge-file in TestWatchdogWedge: in the
// state directory, which the unit creates and the test reaches from the
// host.
const wedgeFile = hostmode.StateDir + "/wedge"

// requireWedgeHook needs the hidden agent flag --debug-wedge-file PATH:
// while PATH exists, the update machine's loop blocks without beating, so
// /livez fails and WATCHDOG=1 stops once the loop is overdue (3 poll
// intervals + 10 s). Hidden flags are not listed by --help: an unknown
// one is refused by name.
func requireWedgeHook(t *testing.T, nodeward string) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	out, _ := exec.CommandContext(ctx, nodeward, "agent", "--debug-wedge-file=/nonexistent", "--node-name=x",
		"--kubeconfig=/dev/null", "--metrics-address=").CombinedOutput()
	testenv.Require(t, !strings.Contains(string(out), "unknown flag"),
		"needs --debug-wedge-file (a hidden `nodeward agent` flag: while the file exists the update loop blocks without beating); the agent says: "+
			strings.TrimSpace(string(out)))
}

// TestWatchdogWedge: a wedged loop stops the watchdog pings; systemd
// kills the agent (Result=watchdog) and starts it again; the new process
// resumes the update where it was and finishes it.
func TestWatchdogWedge(t *testing.T) {
	requireHost(t)
	bin, err := build()
	if err != nil {
		t.Fatal(err)
	}
	requireWedgeHook(t, bin.nodeward)
	h := newHost(t, hostOptions{prefix: "hm-wedge", args: []string{"--debug-wedge-file=" + wedgeFile}})
	before := h.waitActive(time.Minute)
	h.updatePool(true) // staged, no grant yet
	h.waitStep(v1alpha1.StepStaged, 2*time.Minute)

	wedge := filepath.Join(h.root, wedgeFile)
	if err := os.WriteFile(wedge, nil, 0o600); err != nil {
		t.Fatal(err)
	}
	wedged := time.Now()
	h.waitFor(time.Minute, "/livez failing", func() (bool, error) {
		code, _, err := h.get("/livez")
		return err == nil && code == http.StatusServiceUnavailable, err
	})
	livez := time.Since(wedged)
	h.waitFor(time.Minute, "the watchdog firing", func() (bool, error) {
		p := h.show("Result", "NRestarts")
		return p["Result"] == "watchdog" || p["NRestarts"] == "1", nil
	})
	fired := time.Since(wedged)
	// The new process must not wedge again.
	if err := os.Remove(wedge); err != nil {
		t.Fatal(err)
	}
	t.Logf("wedged loop: /livez 503 after %s, the watchdog fired after %s (WatchdogSec %s)",
		livez.Round(time.Millisecond), fired.Round(time.Millisecond), watchdogPeriod)
	var after map[string]string
	h.waitFor(time.Minute, "nodeward.service restarted", func() (bool, error) {
		after = h.show("ActiveState", "NRestarts", "MainPID")
		return after["ActiveState"] == "active" && after["NRestarts"] == "1" && after["MainPID"] != before["MainPID"], nil
	})
	journal := h.journal("0")
	for _, want := range []string{"withholding the systemd watchdog ping", "Watchdog timeout"} {
		if !strings.Contains(journal, want) {
			t.Errorf("the journal lacks %q:\n%s", want, tailString(journal, 4000))
		}
	}
	if step, _, err := h.step(); err != nil || step != v1alpha1.StepStaged {
		t.Fatalf("after the restart: step %s (%v), want Staged", step, err)
	}
	h.waitFor(30*time.Second, "/livez 200 again", func() (bool, error) {
		code, _, err := h.get("/livez")
		return err == nil && code == http.StatusOK, err
	})
	h.setPaused(false)
	h.waitStep(v1alpha1.StepDone, 3*time.Minute)
	h.assertUpdated(2)
}
