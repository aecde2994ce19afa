package conditions

import (
	"context"
	"fmt"
	"os"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/nodeward/nodeward/api/v1alpha1"
	"github.com/nodeward/nodeward/kernelrules"
)

// The kernel-log probe: what the kernel itself logs (/dev/kmsg), matched
// against node-problem-detector's rule format. Temporary problems (an OOM
// kill, an oops, an I/O error) become Warning Events; permanent ones set
// NodewardKernelDeadlock or NodewardReadonlyFilesystem. One reader
// (kernelLog, kernellog.go) feeds a probe per condition.

const kernelName = "kernel"

var kernelKind = probeKind{
	name:       kernelName,
	conditions: kernelConditions(),
	section:    func(c *Config) section { return &c.Kernel },
	build:      buildKernelProbes,
}

// kernelConditions are the conditions of the kernel probes, in order.
func kernelConditions() []conditionRow {
	return []conditionRow{
		{v1alpha1.ConditionKernelDeadlock, "kernel-deadlock"},
		{v1alpha1.ConditionReadonlyFilesystem, "readonly-filesystem"},
	}
}

// npdConditions maps the condition types of node-problem-detector's rule
// files to nodeward's: a permanent rule of another type is refused.
func npdConditions() map[string]corev1.NodeConditionType {
	return map[string]corev1.NodeConditionType{
		"KernelDeadlock":     v1alpha1.ConditionKernelDeadlock,
		"ReadonlyFilesystem": v1alpha1.ConditionReadonlyFilesystem,
	}
}

// KernelConfig: the kernel log and the rules it is matched against.
type KernelConfig struct {
	Enabled bool `json:"enabled"`
	// DefaultRules are nodeward's own rules (kernelrules.Defaults): OOM
	// kill, hung task, oops and BUG, ext4 error, I/O error as Events; hung
	// task as KernelDeadlock; read-only remount and XFS shutdown as
	// ReadonlyFilesystem.
	DefaultRules bool `json:"defaultRules"`
	// RuleFiles are node-problem-detector system-log-monitor rule files
	// (its kernel-monitor.json, readonly-monitor.json, or your own), read
	// as they are, in addition to the defaults. Their permanent rules may
	// set KernelDeadlock and ReadonlyFilesystem.
	RuleFiles []string `json:"ruleFiles,omitempty"`
	// Lookback: on start, records the kernel logged this long before are
	// read too, so that a problem logged just before a restart is found;
	// 0 reads only what is logged after the start.
	Lookback metav1.Duration `json:"lookback"`
	// Interval is how often a permanent problem's cause is re-checked (a
	// filesystem read-write again clears ReadonlyFilesystem).
	Interval metav1.Duration `json:"interval"`
	// CursorFile keeps, across agent restarts within one boot, which
	// record was last reported, so that the look-back sends no Event
	// twice. Empty: none; the agent uses <state-dir>/kernel-log-cursor.
	CursorFile string `json:"cursorFile,omitempty"`
}

func (c *KernelConfig) enabled() bool { return c.Enabled }

func (c *KernelConfig) setDefaults() {
	*c = KernelConfig{Enabled: false, DefaultRules: true,
		Lookback: metav1.Duration{Duration: 5 * time.Minute}, Interval: metav1.Duration{Duration: 10 * time.Second}}
}

func (c *KernelConfig) validate(prefix string, errs *FieldErrors) {
	if c.Lookback.Duration < 0 {
		errs.Add(prefix+"lookback", c.Lookback.Duration, "must not be negative")
	}
	errs.positive(prefix+"interval", c.Interval)
	if !c.Enabled {
		return
	}
	for i, path := range c.RuleFiles {
		if _, err := loadRuleFile(path); err != nil {
			errs.Add(fmt.Sprintf("%sruleFiles[%d]", prefix, i), path, err.Error())
		}
	}
}

// loadRuleFile reads and checks one rule file: it parses, and its
// permanent rules set conditions nodeward publishes.
func loadRuleFile(path string) (*kernelrules.File, error) {
	data, err := os.ReadFile(path)
	if err != nil {
		return nil, err
	}
	f, err := kernelrules.Parse(path, data)
	if err != nil {
		return nil, err
	}
	known := npdConditions()
	for i, r := range f.Rules {
		if _, ok := known[r.Condition]; r.Type == kernelrules.Permanent && !ok {
			return nil, fmt.Errorf("%s: rules[%d] (reason %q).condition %q: nodeward publishes KernelDeadlock and ReadonlyFilesystem only",
				path, i, r.Reason, r.Condition)
		}
	}
	return f, nil
}

// ruleFiles are the rules cfg names, the defaults first; files were
// checked by validate.
func (c *KernelConfig) ruleFiles() []*kernelrules.File {
	var files []*kernelrules.File
	if c.DefaultRules {
		files = append(files, kernelrules.Defaults())
	}
	for _, path := range c.RuleFiles {
		if f, err := loadRuleFile(path); err == nil {
			files = append(files, f)
		}
	}
	return files
}

func buildKernelProbes(c *Config, env *Env) []Probe {
	log := newKernelLog(c.Kernel, c.ProcRoot, env)
	var out []Probe
	for _, row := range kernelConditions() {
		out = append(out, &KernelProbe{log: log, condition: row.condition, interval: c.Kernel.Interval.Duration})
	}
	return out
}

// KernelProbe decides one condition from the kernel log.
type KernelProbe struct {
	log       *kernelLog
	condition corev1.NodeConditionType
	interval  time.Duration
}

func (p *KernelProbe) Name() string                        { return kernelName }
func (p *KernelProbe) Condition() corev1.NodeConditionType { return p.condition }
func (p *KernelProbe) Interval() time.Duration             { return p.interval }

// Sample reads what the kernel logged since the last sample (the first
// reads the look-back) and re-checks the causes of the condition's
// problems.
func (p *KernelProbe) Sample(ctx context.Context) Signal {
	return p.log.sample(ctx, p.condition)
}

// Watch wakes the probe whenever a record changes its condition's problems.
func (p *KernelProbe) Watch(ctx context.Context, wake chan<- struct{}) error {
	return p.log.watch(ctx, p.condition, wake)
}

// Close stops the reader the kernel probes share.
func (p *KernelProbe) Close() { p.log.close() }
