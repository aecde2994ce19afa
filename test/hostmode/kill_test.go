package hostmode_test

import (
	"strings"
	"testing"
	"time"

	v1alpha1 "github.com/nodeward/nodeward/api/v1alpha1"
)

// TestKillMidDrain: `systemctl kill -s KILL nodeward` while a PDB blocks
// the drain. systemd restarts the agent (Restart=always, after
// RestartSec); the new process finds the node still cordoned and draining
// and resumes; once the PDB is gone the update ends Done with one finalize
// and one reboot.
func TestKillMidDrain(t *testing.T) {
	h := newHost(t, hostOptions{prefix: "hm-kill"})
	h.waitActive(time.Minute)
	release := h.pinnedPod()
	h.updatePool(false)
	h.waitStep(v1alpha1.StepDraining, 2*time.Minute)
	h.waitFor(time.Minute, "the drain reported blocked", func() (bool, error) {
		_, reason, err := h.step()
		return strings.Contains(reason, "drain blocked"), err
	})
	before := h.show("MainPID", "InvocationID")
	killed := time.Now()
	h.exec("systemctl", "kill", "-s", "KILL", "nodeward.service")
	var after map[string]string
	h.waitFor(time.Minute, "nodeward.service restarted by systemd", func() (bool, error) {
		after = h.show("ActiveState", "NRestarts", "MainPID", "InvocationID", "ExecMainStartTimestampMonotonic", "ActiveEnterTimestampMonotonic")
		return after["ActiveState"] == "active" && after["NRestarts"] == "1" && after["MainPID"] != before["MainPID"], nil
	})
	t.Logf("restarted and READY %s after the kill (RestartSec=5s); READY %s after its start",
		time.Since(killed).Round(time.Millisecond), readyLatency(after).Round(time.Millisecond))
	if j := h.journal("0"); !strings.Contains(j, "status=9/KILL") {
		t.Errorf("the journal does not show the kill:\n%s", tailString(j, 3000))
	}
	n := h.node()
	step := v1alpha1.Step(n.Annotations[v1alpha1.AnnotationState])
	if _, record := n.Annotations[v1alpha1.AnnotationCordonedBy]; !n.Spec.Unschedulable || !record || step != v1alpha1.StepDraining {
		t.Fatalf("after the restart: unschedulable %v, cordon record %v, step %s; want cordoned by nodeward and Draining", n.Spec.Unschedulable, record, step)
	}
	// The new process loaded the persisted step and drains on.
	ctx, cancel := h.ctx()
	defer cancel()
	if j := h.c.Journal(ctx, "_SYSTEMD_INVOCATION_ID="+after["InvocationID"], "-o", "cat"); !strings.Contains(j, `msg="update state loaded"`) ||
		!strings.Contains(j, "step=Draining") {
		t.Fatalf("the restarted agent did not resume the drain:\n%s", tailString(j, 3000))
	}
	release()
	h.waitStep(v1alpha1.StepDone, 3*time.Minute)
	h.assertUpdated(2)
}
