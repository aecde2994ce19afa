package hostmode_test

import (
	"strings"
	"testing"
	"time"

	v1alpha1 "github.com/nodeward/nodeward/api/v1alpha1"
	"github.com/nodeward/nodeward/test/rpmostree"
)

// finalizeDelay is how long the double's finalize-deployment takes in
// TestStopDuringFinalize: long enough to stop the agent in its middle.
const finalizeDelay = 10 * time.Second

// TestStopDuringFinalize: `systemctl stop nodeward` while rpm-ostree
// finalizes the deployment. The agent tells systemd STOPPING=1, lets the
// finalize run to its end (KillMode=mixed leaves rpm-ostree alone; the
// agent waits for it, within TimeoutStopSec), persists the step and exits
// cleanly (Result=success, exit status 0). The next start resumes the
// update without finalizing again: the reboot, then Done.
func TestStopDuringFinalize(t *testing.T) {
	h := newHost(t, hostOptions{prefix: "hm-stop", tune: func(s *rpmostree.State) { s.FinalizeDelay = finalizeDelay }})
	h.waitActive(time.Minute)
	// systemd logs each notification message it receives at debug level.
	h.exec("systemd-analyze", "log-level", "debug")
	h.updatePool(false)
	h.waitStep(v1alpha1.StepFinalizing, 2*time.Minute)
	h.waitFor(time.Minute, "rpm-ostree finalize-deployment running", func() (bool, error) {
		ctx, cancel := h.ctx()
		defer cancel()
		out, _ := h.c.Exec(ctx, "pgrep", "-f", "rpm-ostree finalize-deployment")
		return strings.TrimSpace(out) != "", nil
	})
	start := time.Now()
	h.exec("systemctl", "stop", "nodeward.service")
	took := time.Since(start)
	h.exec("systemd-analyze", "log-level", "info")
	props := h.show("ActiveState", "Result", "ExecMainCode", "ExecMainStatus")
	t.Logf("systemctl stop took %s during a %s finalize; then %v", took.Round(time.Millisecond), finalizeDelay, props)
	// ExecMainCode 1 is CLD_EXITED: the agent exited, not killed by a signal.
	if props["ActiveState"] != "inactive" || props["Result"] != "success" || props["ExecMainCode"] != "1" || props["ExecMainStatus"] != "0" {
		t.Fatalf("after the stop: %v, want inactive, Result=success, exited with status 0", props)
	}
	if took < finalizeDelay/2 {
		t.Errorf("the stop took %s: it did not wait for the finalize (%s)", took, finalizeDelay)
	}
	journal := h.journal("0")
	if !strings.Contains(journal, "STOPPING=1") {
		t.Errorf("systemd received no STOPPING=1 from the agent:\n%s", tailString(journal, 4000))
	}
	if !strings.Contains(journal, "finalized staged deployment") {
		t.Errorf("the agent did not log the end of the finalize:\n%s", tailString(journal, 4000))
	}
	s := h.double.State(t)
	if s.CallCount("finalize-deployment") != 1 || s.Locked || s.Staged == nil || h.c.Boots() != 1 {
		t.Fatalf("after the stop: %d finalize calls, locked %v, staged %v, container boot %d; want 1 finalize run to its end (unlocked), still staged, no reboot",
			s.CallCount("finalize-deployment"), s.Locked, s.Staged != nil, h.c.Boots())
	}
	if step, _, err := h.step(); err != nil || step != v1alpha1.StepRebooting {
		t.Fatalf("after the stop the node reports %s (%v), want %s: the finalize's end was persisted", step, err, v1alpha1.StepRebooting)
	}
	// The agent asks for the reboot before it is READY: the shutdown then
	// cancels the start job, so systemctl must not wait for it.
	h.exec("systemctl", "start", "--no-block", "nodeward.service")
	h.waitStep(v1alpha1.StepDone, 3*time.Minute)
	h.assertUpdated(2)
	h.assertLogindReboot()
}
