package hostmode_test

import (
	"strconv"
	"strings"
	"testing"
	"time"

	v1alpha1 "github.com/nodeward/nodeward/api/v1alpha1"
	"github.com/nodeward/nodeward/test/rpmostree"
	"github.com/nodeward/nodeward/test/sim"
)

// TestUpdate: a whole update in host mode. nodeward's coordinator, on the
// test host, grants the node of an UpdatePool; the agent stages, cordons,
// drains, finalizes and reboots through the real logind on the container's
// system bus; the container really reboots (a new kernel boot ID, the
// double boots the finalized deployment); the agent starts again from its
// enabled unit, verifies the booted OS, uncordons and reports Done.
func TestUpdate(t *testing.T) {
	h := newHost(t, hostOptions{prefix: "hm-update"})
	before := h.waitActive(time.Minute)
	oldBoot := h.bootID()
	steps := h.recordSteps()
	start := time.Now()
	h.updatePool(false)
	h.waitStep(v1alpha1.StepDone, 3*time.Minute)
	t.Logf("grant to Done in %s, steps %v; systemd booted again in %s",
		time.Since(start).Round(time.Millisecond), steps(), h.bootTime().Round(time.Millisecond))
	h.assertUpdated(2)
	if h.bootID() == oldBoot {
		t.Fatal("the container's boot ID did not change")
	}
	after := h.show("ActiveState", "NRestarts", "InvocationID")
	if after["ActiveState"] != "active" || after["NRestarts"] != "0" || after["InvocationID"] == before["InvocationID"] {
		t.Fatalf("after the reboot: %v, want a new invocation, active, 0 restarts (before: %v)", after, before)
	}
	h.assertLogindReboot()
}

// assertUpdated checks the end of one update: Done on the target,
// schedulable, no cordon record, the double booted into the target after
// exactly one finalize, the container at boot number boots.
func (h *host) assertUpdated(boots int) {
	t := h.t
	t.Helper()
	n := h.node()
	s, err := rpmostree.Load(h.double.Dir)
	if err != nil {
		t.Fatal(err)
	}
	booted, err := s.BootedDeployment()
	if err != nil {
		t.Fatal(err)
	}
	_, record := n.Annotations[v1alpha1.AnnotationCordonedBy]
	if n.Annotations[v1alpha1.AnnotationState] != string(v1alpha1.StepDone) || n.Spec.Unschedulable || record ||
		booted.Checksum != sim.ProcNewChecksum || s.Boots != 1 || s.CallCount("finalize-deployment") != 1 || h.c.Boots() != boots {
		t.Fatalf("%s: state %s, unschedulable %v, cordon record %v; double booted %s after %d boots and %d finalize calls; container boot %d; "+
			"want Done, schedulable, no record, %s after 1 boot and 1 finalize, container boot %d",
			h.name, n.Annotations[v1alpha1.AnnotationState], n.Spec.Unschedulable, record, booted.Checksum, s.Boots,
			s.CallCount("finalize-deployment"), h.c.Boots(), sim.ProcNewChecksum, boots)
	}
}

// assertLogindReboot checks in the previous boot's journal that the agent
// rebooted through logind over D-Bus, not through its systemctl fallback,
// and that logind took the request.
func (h *host) assertLogindReboot() {
	t := h.t
	t.Helper()
	agent := h.journal("-1")
	if !strings.Contains(agent, "rebooting through logind") || strings.Contains(agent, "falling back to systemctl") {
		t.Fatalf("the agent's journal of the boot before does not show a reboot through logind:\n%s", tailString(agent, 4000))
	}
	ctx, cancel := h.ctx()
	defer cancel()
	if logind := h.c.Journal(ctx, "-b", "-1", "-u", "systemd-logind.service"); !strings.Contains(logind, "System is rebooting") {
		t.Fatalf("logind's journal of the boot before has no reboot:\n%s", logind)
	}
}

// bootTime is how long the container's systemd took to boot this time,
// from its start to the end of the boot transaction.
func (h *host) bootTime() time.Duration {
	h.t.Helper()
	ctx, cancel := h.ctx()
	defer cancel()
	if err := h.c.WaitBoot(ctx, h.c.Boots()); err != nil {
		h.t.Fatal(err)
	}
	props := map[string]int64{}
	for _, line := range strings.Split(h.exec("systemctl", "show", "-p", "UserspaceTimestampMonotonic", "-p", "FinishTimestampMonotonic"), "\n") {
		if k, v, ok := strings.Cut(line, "="); ok {
			props[k], _ = strconv.ParseInt(v, 10, 64)
		}
	}
	return time.Duration(props["FinishTimestampMonotonic"]-props["UserspaceTimestampMonotonic"]) * time.Microsecond
}
