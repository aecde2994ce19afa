package conditions

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"time"

	corev1 "k8s.io/api/core/v1"

	"github.com/nodeward/nodeward/api/v1alpha1"
)

// PIDsProbe compares the number of processes and threads with the lower of
// kernel.pid_max and kernel.threads-max.
type PIDsProbe struct {
	cfg      PIDsConfig
	procRoot string
	metrics  *Metrics
}

// NewPIDsProbe reads /proc under procRoot.
func NewPIDsProbe(cfg PIDsConfig, procRoot string, m *Metrics) *PIDsProbe {
	return &PIDsProbe{cfg: cfg, procRoot: procRoot, metrics: orDiscard(m)}
}

func (p *PIDsProbe) Interval() time.Duration             { return p.cfg.PollInterval.Duration }
func (p *PIDsProbe) Name() string                        { return "pids" }
func (p *PIDsProbe) Condition() corev1.NodeConditionType { return v1alpha1.ConditionPIDPressure }

// Sample reads the 4th field of loadavg ("running/total"; total counts
// every task, which is what pid_max and threads-max limit).
func (p *PIDsProbe) Sample(context.Context) Signal {
	s := Signal{Condition: p.Condition(), At: time.Now()}
	used, err := readLoadavgTasks(filepath.Join(p.procRoot, "loadavg"))
	if err != nil {
		return p.unknown(s, err)
	}
	pidMax, err := readUintFile(filepath.Join(p.procRoot, "sys/kernel/pid_max"))
	if err != nil {
		return p.unknown(s, err)
	}
	threadsMax, err := readUintFile(filepath.Join(p.procRoot, "sys/kernel/threads-max"))
	if err != nil {
		return p.unknown(s, err)
	}
	limit := min(pidMax, threadsMax)
	p.metrics.setGauge(p.metrics.processes, float64(used))
	p.metrics.setGauge(p.metrics.processesLimit, float64(limit))
	pct := 100 * float64(used) / float64(max(limit, 1))
	msg := fmt.Sprintf("%d of %d process IDs in use (%.1f%%)", used, limit, pct)
	if pct > p.cfg.MaxUsedPercent {
		s.Health, s.Reason, s.Message = Unhealthy, "PIDPressure", msg+fmt.Sprintf(", above %.1f%%", p.cfg.MaxUsedPercent)
		return s
	}
	s.Health, s.Reason, s.Message = Healthy, "PIDsAvailable", msg
	return s
}

func (p *PIDsProbe) unknown(s Signal, err error) Signal {
	p.metrics.ProbeError(p.Name())
	s.Health, s.Reason, s.Message = Unknown, "ProcUnreadable", err.Error()
	return s
}

func readLoadavgTasks(path string) (uint64, error) {
	data, err := os.ReadFile(path)
	if err != nil {
		return 0, fmt.Errorf("read loadavg: %w", err)
	}
	fields := strings.Fields(string(data))
	if len(fields) < 4 {
		return 0, fmt.Errorf("parse %s: want at least 4 fields, got %q", path, strings.TrimSpace(string(data)))
	}
	_, total, ok := strings.Cut(fields[3], "/")
	n, err := strconv.ParseUint(total, 10, 64)
	if !ok || err != nil {
		return 0, fmt.Errorf("parse %s: 4th field %q is not running/total", path, fields[3])
	}
	return n, nil
}

func readUintFile(path string) (uint64, error) {
	data, err := os.ReadFile(path)
	if err != nil {
		return 0, fmt.Errorf("read %s: %w", path, err)
	}
	n, err := strconv.ParseUint(strings.TrimSpace(string(data)), 10, 64)
	if err != nil {
		return 0, fmt.Errorf("parse %s: %w", path, err)
	}
	return n, nil
}
