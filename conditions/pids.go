package conditions

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/nodeward/nodeward/api/v1alpha1"
)

const (
	pidsName      = "pids"
	pidsCondition = v1alpha1.ConditionPIDPressure
)

var pidsKind = probeKind{
	name: pidsName, conditions: []conditionRow{{pidsCondition, "pid-pressure"}},
	section: func(c *Config) section { return &c.PIDs },
	build:   func(c *Config, env *Env) []Probe { return []Probe{NewPIDsProbe(c.PIDs, c.ProcRoot, env)} },
}

// PIDsConfig: processes against min(pid_max, threads-max).
type PIDsConfig struct {
	Enabled        bool            `json:"enabled"`
	MaxUsedPercent float64         `json:"maxUsedPercent"`
	PollInterval   metav1.Duration `json:"pollInterval"`
}

func (c *PIDsConfig) enabled() bool { return c.Enabled }

func (c *PIDsConfig) setDefaults() {
	*c = PIDsConfig{Enabled: true, MaxUsedPercent: 90, PollInterval: metav1.Duration{Duration: 10 * time.Second}}
}

func (c *PIDsConfig) validate(prefix string, errs *FieldErrors) {
	errs.positive(prefix+"pollInterval", c.PollInterval)
	errs.percent(prefix+"maxUsedPercent", c.MaxUsedPercent)
}

// pidsMetrics are the task count and its limit.
type pidsMetrics struct {
	processes, limit prometheus.Gauge
}

func newPIDsMetrics(reg prometheus.Registerer) *pidsMetrics {
	m := &pidsMetrics{
		processes: gauge("processes", "Processes and threads (4th field of /proc/loadavg)."),
		limit:     gauge("processes_limit", "min(pid_max, threads-max)."),
	}
	reg.MustRegister(m.processes, m.limit)
	return m
}

// PIDsProbe compares the number of processes and threads with the lower of
// kernel.pid_max and kernel.threads-max.
type PIDsProbe struct {
	cfg      PIDsConfig
	procRoot string
	metrics  *pidsMetrics
	now      func() time.Time
}

// NewPIDsProbe reads /proc under procRoot and registers its metrics on
// env's Registerer; a nil env stands for the defaults.
func NewPIDsProbe(cfg PIDsConfig, procRoot string, env *Env) *PIDsProbe {
	return &PIDsProbe{cfg: cfg, procRoot: procRoot, metrics: newPIDsMetrics(env.registerer()), now: env.now()}
}

func (p *PIDsProbe) Interval() time.Duration             { return p.cfg.PollInterval.Duration }
func (p *PIDsProbe) Name() string                        { return pidsName }
func (p *PIDsProbe) Condition() corev1.NodeConditionType { return pidsCondition }

// Sample reads the 4th field of loadavg ("running/total"; total counts
// every task, which is what pid_max and threads-max limit).
func (p *PIDsProbe) Sample(context.Context) Signal {
	s := Signal{Condition: p.Condition(), At: p.now()}
	used, err := readLoadavgTasks(filepath.Join(p.procRoot, "loadavg"))
	if err != nil {
		return unknown(s, "ProcUnreadable", err)
	}
	pidMax, err := readUintFile(filepath.Join(p.procRoot, "sys/kernel/pid_max"))
	if err != nil {
		return unknown(s, "ProcUnreadable", err)
	}
	threadsMax, err := readUintFile(filepath.Join(p.procRoot, "sys/kernel/threads-max"))
	if err != nil {
		return unknown(s, "ProcUnreadable", err)
	}
	limit := min(pidMax, threadsMax)
	p.metrics.processes.Set(float64(used))
	p.metrics.limit.Set(float64(limit))
	pct := 100 * float64(used) / float64(max(limit, 1))
	msg := fmt.Sprintf("%d of %d process IDs in use (%.1f%%)", used, limit, pct)
	if pct > p.cfg.MaxUsedPercent {
		s.Verdict, s.Reason, s.Message = Unhealthy, "PIDPressure", msg+fmt.Sprintf(", above %.1f%%", p.cfg.MaxUsedPercent)
		return s
	}
	s.Verdict, s.Reason, s.Message = Healthy, "PIDsAvailable", msg
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
