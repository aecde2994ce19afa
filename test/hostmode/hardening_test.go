package hostmode_test

import (
	"bytes"
	"context"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	v1alpha1 "github.com/nodeward/nodeward/api/v1alpha1"
	"github.com/nodeward/nodeward/test/hostmode"
)

// TestHardening: the unit's hardening stays — the installed unit is the
// project's file, the test drop-in changes only WatchdogSec and ExecStart,
// systemd applies every directive (systemctl show, and the agent process's
// own no_new_privs and seccomp filter) — and under it the agent works: its
// memory PSI trigger is armed (the kernel accepts the write to
// /proc/pressure/memory), its netlink subscription to links, addresses and
// routes opens and the network condition is published, its textfile lands
// in node_exporter's directory, its Lease and conditions reach the API
// server. D-Bus to logind under the same unit is TestUpdate's reboot.
func TestHardening(t *testing.T) {
	h := newHost(t, hostOptions{prefix: "hm-harden"})
	props := h.waitActive(time.Minute)

	installed, err := os.ReadFile(filepath.Join(h.root, hostmode.UnitPath))
	if err != nil {
		t.Fatal(err)
	}
	if !bytes.Equal(installed, h.unit) {
		t.Fatal("the installed unit is not the project's systemd/nodeward.service")
	}
	dropIn, err := os.ReadFile(filepath.Join(h.root, hostmode.DropInPath))
	if err != nil {
		t.Fatal(err)
	}
	for _, d := range hostmode.UnitDirectives(dropIn) {
		if key, _, _ := strings.Cut(d, "="); key != "WatchdogSec" && key != "ExecStart" {
			t.Errorf("the test drop-in changes %s", d)
		}
	}
	if got := h.show("DropInPaths")["DropInPaths"]; got != hostmode.DropInPath {
		t.Errorf("drop-ins %q, want only %s", got, hostmode.DropInPath)
	}

	// Each hardening directive of the unit, as systemd applied it.
	want := map[string]string{}
	for _, d := range hostmode.UnitDirectives(h.unit) {
		k, v, _ := strings.Cut(d, "=")
		want[k] = v
	}
	hardening := []string{"NoNewPrivileges", "ProtectSystem", "ProtectHome", "PrivateTmp", "ProtectKernelModules",
		"ProtectKernelLogs", "ProtectClock", "ProtectHostname", "RestrictRealtime", "RestrictSUIDSGID", "LockPersonality",
		"MemoryDenyWriteExecute", "RestrictNamespaces", "RestrictAddressFamilies", "SystemCallArchitectures",
		"SystemCallFilter", "ReadWritePaths", "MemoryMax", "CPUWeight", "KillMode", "NotifyAccess", "Type", "Restart"}
	got := h.show(hardening...)
	for _, k := range hardening {
		w, ok := want[k]
		if !ok {
			t.Errorf("the unit no longer sets %s", k)
			continue
		}
		if !sameSetting(k, w, got[k]) {
			t.Errorf("%s=%s in the unit, systemd applies %q", k, w, got[k])
		}
	}
	status := h.exec("cat", "/proc/"+props["MainPID"]+"/status")
	for _, line := range []string{"NoNewPrivs:\t1", "Seccomp:\t2"} {
		if !strings.Contains(status, line+"\n") {
			t.Errorf("the agent process lacks %q:\n%s", line, status)
		}
	}

	// The PSI trigger where the kernel takes its 1 s window, the stall
	// totals polled where it refuses it to an agent without
	// CAP_SYS_RESOURCE (as on the machines the tests run on): either way
	// memory stall is watched under the unit's hardening.
	h.waitFor(30*time.Second, "memory stall watched (PSI trigger armed or totals polled)", func() (bool, error) {
		trigger, err := h.metric("nodeward_pressure_memory_trigger_active")
		if err != nil {
			return false, err
		}
		polling, err := h.metric("nodeward_pressure_memory_polling")
		return trigger == "1" || polling == "1", err
	})
	h.waitFor(30*time.Second, "network up from netlink", func() (bool, error) {
		v, err := h.metric("nodeward_network_up")
		return v == "1", err
	})
	h.waitFor(30*time.Second, "conditions published, Lease renewed", func() (bool, error) {
		n, err := h.cp.Client().CoreV1().Nodes().Get(context.Background(), h.name, metav1.GetOptions{})
		if err != nil {
			return false, err
		}
		published := 0
		for _, c := range n.Status.Conditions {
			if slices.Contains(v1alpha1.HealthConditions(), c.Type) && c.Status == corev1.ConditionFalse {
				published++
			}
		}
		_, err = h.cp.Client().CoordinationV1().Leases(v1alpha1.AgentLeaseNamespace).Get(context.Background(), "nodeward-agent-"+h.name, metav1.GetOptions{})
		return published >= 4 && err == nil, err
	})
	h.waitFor(30*time.Second, "nodeward.prom in node_exporter's textfile directory", func() (bool, error) {
		data, err := os.ReadFile(filepath.Join(h.root, hostmode.TextfileDir, "nodeward.prom"))
		return bytes.Contains(data, []byte("nodeward_network_up 1")), err
	})
	journal := h.journal("0")
	for _, bad := range []string{"probe events unavailable", "subscribe", "permission denied", "operation not permitted", "read-only file system"} {
		if strings.Contains(strings.ToLower(journal), bad) {
			t.Errorf("the agent's journal mentions %q:\n%s", bad, tailString(journal, 4000))
		}
	}
	if resubscribes, err := h.metric("nodeward_netlink_resubscribes_total"); err != nil || resubscribes != "0" {
		t.Errorf("netlink resubscribes: %s (%v), want 0", resubscribes, err)
	}
}

// sameSetting compares a unit directive with systemctl show's rendering
// of it.
func sameSetting(key, unit, shown string) bool {
	switch key {
	case "RestrictAddressFamilies":
		a, b := strings.Fields(unit), strings.Fields(shown)
		slices.Sort(a)
		slices.Sort(b)
		return slices.Equal(a, b)
	case "SystemCallFilter":
		// The allow-list expanded: the service set is in, reboot(2) and
		// module loading are not.
		calls := strings.Fields(shown)
		return unit == "@system-service" && slices.Contains(calls, "epoll_wait") &&
			!slices.Contains(calls, "reboot") && !slices.Contains(calls, "init_module")
	case "MemoryMax":
		return unit == "256M" && shown == "268435456"
	}
	return unit == shown
}
