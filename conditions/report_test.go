package conditions

import (
	"context"
	"slices"
	"testing"
)

// TestCheckReportAndExitCode: 0 healthy, 1 a condition True (even with an
// Unknown beside it), 2 a probe could not run; the taints that would follow
// are listed in kubectl's form.
func TestCheckReportAndExitCode(t *testing.T) {
	t.Parallel()
	cfg := DefaultConfig()
	table := NewTaintTable(cfg.Taints)
	pids := writeProc(t, map[string]string{"loadavg": "0 0 0 1/100 5\n", "sys/kernel/pid_max": "32768\n", "sys/kernel/threads-max": "90000\n"})
	healthyMem := writeProc(t, map[string]string{"meminfo": meminfo(8<<20, 4<<20)})
	lowMem := writeProc(t, map[string]string{"meminfo": meminfo(8<<20, 100<<10)})
	empty := t.TempDir()

	r := Check(context.Background(), []Probe{NewMemoryProbe(cfg.Memory, healthyMem, nil), NewPIDsProbe(cfg.PIDs, pids, nil)}, table)
	if r.ExitCode() != 0 || len(r.Taints) != 0 || len(r.Probes) != 2 || r.Probes[0].Status != "False" {
		t.Errorf("healthy: exit %d, %+v", r.ExitCode(), r)
	}
	r = Check(context.Background(), []Probe{NewMemoryProbe(cfg.Memory, healthyMem, nil), NewPIDsProbe(cfg.PIDs, empty, nil)}, table)
	if r.ExitCode() != 2 || r.Probes[1].Status != "Unknown" || r.Probes[1].Reason != "ProcUnreadable" {
		t.Errorf("unreadable pids: exit %d, %+v", r.ExitCode(), r)
	}
	r = Check(context.Background(), []Probe{NewMemoryProbe(cfg.Memory, lowMem, nil), NewPIDsProbe(cfg.PIDs, empty, nil)}, table)
	if r.ExitCode() != 1 || !slices.Equal(r.Taints, []string{"nodeward.io/memory-pressure:NoSchedule"}) {
		t.Errorf("memory pressure: exit %d, taints %v", r.ExitCode(), r.Taints)
	}
}
