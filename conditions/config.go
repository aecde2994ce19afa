package conditions

import (
	"fmt"
	"strings"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/nodeward/nodeward/api/v1alpha1"
	"github.com/nodeward/nodeward/conditions/taints"
)

// Config is the health configuration: how the host is probed, how samples
// become conditions and which taints follow. It is the health part of the
// agent's configuration file (daemon.FileConfig); flags override the
// common fields. Durations are Go durations ("30s", "5m"). Each probe's
// section is declared in the probe's file.
type Config struct {
	// ProcRoot is where /proc is read; fixtures stand in for it in tests.
	ProcRoot string `json:"procRoot,omitempty"`

	Hysteresis HysteresisConfig `json:"hysteresis"`
	// HeartbeatInterval is how often unchanged conditions are re-written
	// (lastHeartbeatTime); changes are written at once.
	HeartbeatInterval metav1.Duration `json:"heartbeatInterval"`

	Memory  MemoryConfig  `json:"memory"`
	Disk    DiskConfig    `json:"disk"`
	PIDs    PIDsConfig    `json:"pids"`
	Network NetworkConfig `json:"network"`
	Runtime RuntimeConfig `json:"runtime"`
	Kernel  KernelConfig  `json:"kernel"`

	// Taints maps conditions to the taints applied while they are True.
	Taints []TaintPolicy `json:"taints"`
}

// HysteresisConfig damps flapping: a condition turns True after BadSamples
// consecutive bad samples and back to False only after QuietPeriod without
// a bad one.
type HysteresisConfig struct {
	BadSamples  int             `json:"badSamples"`
	QuietPeriod metav1.Duration `json:"quietPeriod"`
}

// TaintPolicy is one row of the policy table.
type TaintPolicy struct {
	Condition corev1.NodeConditionType `json:"condition"`
	Key       string                   `json:"key"`
	Value     string                   `json:"value,omitempty"`
	Effect    corev1.TaintEffect       `json:"effect"`
}

// Taint is the taint of the row.
func (p TaintPolicy) Taint() corev1.Taint {
	return corev1.Taint{Key: p.Key, Value: p.Value, Effect: p.Effect}
}

// DefaultConfig is used where the file says nothing.
func DefaultConfig() Config {
	cfg := Config{
		ProcRoot:          "/proc",
		Hysteresis:        HysteresisConfig{BadSamples: 1, QuietPeriod: metav1.Duration{Duration: 5 * time.Minute}},
		HeartbeatInterval: metav1.Duration{Duration: 5 * time.Minute},
		Taints:            DefaultTaintPolicy(),
	}
	for _, k := range probeKinds {
		k.section(&cfg).setDefaults()
	}
	return cfg
}

// DefaultTaintPolicy taints NoSchedule under nodeward.io/ for every health
// condition.
func DefaultTaintPolicy() []TaintPolicy {
	rows := make([]TaintPolicy, 0, len(probeKinds))
	for _, k := range probeKinds {
		for _, c := range k.conditions {
			rows = append(rows, TaintPolicy{Condition: c.condition, Key: v1alpha1.GroupName + "/" + c.taint,
				Effect: corev1.TaintEffectNoSchedule})
		}
	}
	return rows
}

// ParseConfig reads YAML over the defaults and validates the result
// (DecodeFile; its warnings are dropped). The agent's file holds more than
// the health part: daemon.ParseFileConfig reads that.
func ParseConfig(data []byte) (Config, error) {
	cfg := DefaultConfig()
	// A list in the file replaces the default list whole.
	if _, err := DecodeFile(data, &cfg, cfg.Validate); err != nil {
		return Config{}, err
	}
	return cfg, nil
}

// Validate refuses values the agent cannot run with, naming the field. The
// error is a FieldErrors.
func (c *Config) Validate() error {
	var errs FieldErrors
	if c.ProcRoot == "" {
		errs.Add("procRoot", c.ProcRoot, "must name a directory")
	}
	if c.Hysteresis.BadSamples < 1 {
		errs.Add("hysteresis.badSamples", c.Hysteresis.BadSamples, "must be at least 1")
	}
	if c.Hysteresis.QuietPeriod.Duration < 0 {
		errs.Add("hysteresis.quietPeriod", c.Hysteresis.QuietPeriod.Duration, "must not be negative")
	}
	errs.positive("heartbeatInterval", c.HeartbeatInterval)
	for _, k := range probeKinds {
		k.section(c).validate(k.name+".", &errs)
	}
	c.validateTaints(&errs)
	return errs.Err()
}

func (c *Config) validateTaints(errs *FieldErrors) {
	known := map[corev1.NodeConditionType]bool{}
	for _, t := range v1alpha1.HealthConditions() {
		known[t] = true
	}
	seen := map[string]bool{}
	for i, p := range c.Taints {
		field := fmt.Sprintf("taints[%d]", i)
		if !known[p.Condition] {
			errs.Add(field+".condition", p.Condition, "must be one of nodeward's health conditions")
		}
		if err := taints.ValidateKey(p.Key); err != nil {
			errs.Add(field+".key", p.Key, err.Error())
		} else if reservedTaintKey(p.Key) {
			// Owning such a key would make nodeward remove the node
			// lifecycle controller's or the kubelet's taints.
			errs.Add(field+".key", p.Key, "belongs to Kubernetes itself (kubernetes.io / k8s.io prefixes)")
		}
		if err := taints.ValidateValue(p.Value); err != nil {
			errs.Add(field+".value", p.Value, err.Error())
		}
		if err := taints.ValidateEffect(p.Effect); err != nil {
			errs.Add(field+".effect", p.Effect, err.Error())
		}
		id := p.Key + ":" + string(p.Effect)
		if seen[id] {
			errs.Add(field, id, "duplicate key and effect")
		}
		seen[id] = true
	}
}

func reservedTaintKey(key string) bool {
	prefix, _, ok := strings.Cut(key, "/")
	if !ok {
		return false
	}
	for _, domain := range []string{"kubernetes.io", "k8s.io"} {
		if prefix == domain || strings.HasSuffix(prefix, "."+domain) {
			return true
		}
	}
	return false
}

// FieldError is one invalid value of a configuration.
type FieldError struct {
	// Field is the value's path in the file ("memory.pollInterval").
	Field string
	Value any
	// Why says what a valid value looks like.
	Why string
	// Line is the value's line in the file; 0 when the file does not
	// hold it (a default, a flag).
	Line int
}

func (e FieldError) Error() string {
	msg := fmt.Sprintf("%s: invalid value %q: %s", e.Field, fmt.Sprint(e.Value), e.Why)
	if e.Line > 0 {
		return fmt.Sprintf("line %d: %s", e.Line, msg)
	}
	return msg
}

// FieldErrors are every invalid value of a configuration. As an error it
// reads "invalid config: " and each of them, joined by "; ".
type FieldErrors []FieldError

// Add records an invalid value.
func (errs *FieldErrors) Add(field string, value any, why string) {
	*errs = append(*errs, FieldError{Field: field, Value: value, Why: why})
}

func (errs *FieldErrors) addAt(line int, field string, value any, why string) {
	*errs = append(*errs, FieldError{Field: field, Value: value, Why: why, Line: line})
}

// Err is errs as an error, nil when there are none.
func (errs FieldErrors) Err() error {
	if len(errs) == 0 {
		return nil
	}
	return errs
}

func (errs FieldErrors) Error() string {
	msgs := make([]string, len(errs))
	for i, e := range errs {
		msgs[i] = e.Error()
	}
	return "invalid config: " + strings.Join(msgs, "; ")
}

func (errs *FieldErrors) positive(field string, d metav1.Duration) {
	if d.Duration <= 0 {
		errs.Add(field, d.Duration, "must be a positive duration")
	}
}

func (errs *FieldErrors) percent(field string, p float64) {
	if p < 0 || p > 100 || p != p {
		errs.Add(field, p, "must be a percentage between 0 and 100")
	}
}
