package conditions

import (
	"context"
	"os"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus/testutil"
	"golang.org/x/sys/unix"

	"github.com/nodeward/nodeward/test/testenv"
)

func TestWidenedTriggerKeepsTheShareOfStall(t *testing.T) {
	for _, tc := range []struct {
		in, want string
		window   time.Duration
		ok       bool
	}{
		{"full 75000 1000000", "full 150000 2000000", 2 * time.Second, true},
		{"some 100000 500000", "some 400000 2000000", 2 * time.Second, true},
		{"full 300000 3000000", "full 400000 4000000", 4 * time.Second, true},
		{"full 150000 2000000", "", 0, false},
		{"bad", "", 0, false},
	} {
		wide, window, ok := widenedTrigger(tc.in)
		if wide != tc.want || window != tc.window || ok != tc.ok {
			t.Errorf("widenedTrigger(%q) = %q %v %v; want %q %v %v", tc.in, wide, window, ok, tc.want, tc.window, tc.ok)
		}
	}
}

// TestDefaultTriggerWindowFollowsTheKernel: the default trigger's 1 s window
// is armed when the agent holds CAP_SYS_RESOURCE; without it the kernel
// refuses 1 s and the probe polls the stall totals over the same 1 s
// window. Either way the window in force is 1 s, and the mode is reported.
func TestDefaultTriggerWindowFollowsTheKernel(t *testing.T) {
	t.Parallel()
	testenv.Require(t, fileExists("/proc/pressure/memory"), "kernel without PSI")
	probe := NewMemoryProbe(DefaultConfig().Memory, "/proc", nil)
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	watchArmed(ctx, t, probe, "/proc")
	want := time.Second
	privileged := hasCapability(t, unix.CAP_SYS_RESOURCE)
	if triggerArmed(probe) != privileged || pollingTotals(probe) == privileged {
		t.Fatalf("CAP_SYS_RESOURCE %v: trigger armed %v, polling %v; want the trigger exactly when privileged",
			privileged, triggerArmed(probe), pollingTotals(probe))
	}
	if got := time.Duration(probe.triggerWindow.Load()); got != want {
		t.Fatalf("trigger window %v; want %v", got, want)
	}
	if got := testutil.ToFloat64(probe.metrics.triggerWindow); got != want.Seconds() {
		t.Fatalf("nodeward_pressure_memory_trigger_window_seconds %v; want %v", got, want.Seconds())
	}
	t.Logf("%v window, kernel trigger %v, polled totals %v (CAP_SYS_RESOURCE: %v)", want, triggerArmed(probe), pollingTotals(probe), privileged)
}

// hasCapability reads the effective capability set of this process.
func hasCapability(t *testing.T, c int) bool {
	t.Helper()
	data, err := os.ReadFile("/proc/self/status")
	if err != nil {
		t.Fatal(err)
	}
	for _, line := range strings.Split(string(data), "\n") {
		if v, ok := strings.CutPrefix(line, "CapEff:"); ok {
			bits, err := strconv.ParseUint(strings.TrimSpace(v), 16, 64)
			if err != nil {
				t.Fatal(err)
			}
			return bits&(1<<c) != 0
		}
	}
	t.Fatal("no CapEff in /proc/self/status")
	return false
}
