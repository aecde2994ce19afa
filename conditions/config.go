package conditions

import (
	"bytes"
	"fmt"
	"net"
	"os"
	"strings"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"sigs.k8s.io/yaml"

	"github.com/nodeward/nodeward/api/v1alpha1"
	"github.com/nodeward/nodeward/conditions/taints"
)

// Config is the health configuration: the YAML file given with --config,
// with flags overriding the common fields. Durations are Go durations
// ("30s", "5m").
type Config struct {
	// ProcRoot is where /proc is read; fixtures stand in for it in tests.
	ProcRoot string `json:"procRoot,omitempty"`
	// MetricsAddress serves /metrics, /healthz and /readyz; loopback by
	// default, empty to disable.
	MetricsAddress string `json:"metricsAddress,omitempty"`
	// TextfileDirectory, when set, receives nodeward.prom for
	// node_exporter's textfile collector.
	TextfileDirectory string `json:"textfileDirectory,omitempty"`

	Hysteresis HysteresisConfig `json:"hysteresis"`
	// HeartbeatInterval is how often unchanged conditions are re-written
	// (lastHeartbeatTime); changes are written at once.
	HeartbeatInterval metav1.Duration `json:"heartbeatInterval"`
	// LeaseRenewInterval is how often the agent renews its liveness Lease.
	LeaseRenewInterval metav1.Duration `json:"leaseRenewInterval"`

	Memory  MemoryConfig  `json:"memory"`
	Disk    DiskConfig    `json:"disk"`
	PIDs    PIDsConfig    `json:"pids"`
	Network NetworkConfig `json:"network"`
	Runtime RuntimeConfig `json:"runtime"`

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

// MemoryConfig: MemAvailable and memory PSI.
type MemoryConfig struct {
	Enabled bool `json:"enabled"`
	// MinAvailableBytes and MinAvailablePercent (of MemTotal): below either
	// is pressure; 0 disables that check.
	MinAvailableBytes   uint64  `json:"minAvailableBytes"`
	MinAvailablePercent float64 `json:"minAvailablePercent"`
	// PSISomeAvg10Percent and PSIFullAvg10Percent: above either is
	// pressure; 0 disables that check.
	PSISomeAvg10Percent float64 `json:"psiSomeAvg10Percent"`
	PSIFullAvg10Percent float64 `json:"psiFullAvg10Percent"`
	// Trigger is a PSI trigger ("some 150000 2000000": 150 ms of stall in a
	// 2 s window). Each kernel event wakes the probe at once and is
	// pressure for the next 1.5 windows; empty disables it.
	Trigger      string          `json:"trigger"`
	PollInterval metav1.Duration `json:"pollInterval"`
}

// DiskConfig: free bytes and inodes of the filesystems holding Paths.
type DiskConfig struct {
	Enabled bool     `json:"enabled"`
	Paths   []string `json:"paths"`
	// MinAvailablePercent and MinInodesFreePercent: below either is
	// pressure.
	MinAvailablePercent  float64         `json:"minAvailablePercent"`
	MinInodesFreePercent float64         `json:"minInodesFreePercent"`
	PollInterval         metav1.Duration `json:"pollInterval"`
}

// PIDsConfig: processes against min(pid_max, threads-max).
type PIDsConfig struct {
	Enabled        bool            `json:"enabled"`
	MaxUsedPercent float64         `json:"maxUsedPercent"`
	PollInterval   metav1.Duration `json:"pollInterval"`
}

// NetworkConfig: a default route whose link is up with carrier and holds a
// global address.
type NetworkConfig struct {
	Enabled bool `json:"enabled"`
	// Family is "ipv4", "ipv6" or "any" (either family's default route).
	Family string `json:"family"`
	// Interface, when set, must be the default route's output link.
	Interface string `json:"interface,omitempty"`
	// RelistInterval re-reads everything as a backstop to the events.
	RelistInterval metav1.Duration `json:"relistInterval"`
}

// RuntimeConfig: the container runtime's CRI socket.
type RuntimeConfig struct {
	Enabled bool `json:"enabled"`
	// Endpoint is the CRI socket, unix:///path or /path.
	Endpoint     string          `json:"endpoint"`
	Timeout      metav1.Duration `json:"timeout"`
	PollInterval metav1.Duration `json:"pollInterval"`
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
	d := func(x time.Duration) metav1.Duration { return metav1.Duration{Duration: x} }
	return Config{
		ProcRoot:           "/proc",
		MetricsAddress:     "127.0.0.1:9741",
		Hysteresis:         HysteresisConfig{BadSamples: 1, QuietPeriod: d(5 * time.Minute)},
		HeartbeatInterval:  d(5 * time.Minute),
		LeaseRenewInterval: d(80 * time.Second),
		Memory: MemoryConfig{
			Enabled: true, MinAvailablePercent: 5, PSIFullAvg10Percent: 20,
			Trigger: "full 150000 2000000", PollInterval: d(10 * time.Second),
		},
		Disk: DiskConfig{
			Enabled:             true,
			Paths:               []string{"/", "/var", "/var/lib/containers", "/var/lib/kubelet"},
			MinAvailablePercent: 10, MinInodesFreePercent: 5, PollInterval: d(10 * time.Second),
		},
		PIDs:    PIDsConfig{Enabled: true, MaxUsedPercent: 90, PollInterval: d(10 * time.Second)},
		Network: NetworkConfig{Enabled: true, Family: "any", RelistInterval: d(time.Minute)},
		Runtime: RuntimeConfig{
			Enabled: true, Endpoint: "unix:///run/containerd/containerd.sock",
			Timeout: d(2 * time.Second), PollInterval: d(5 * time.Second),
		},
		Taints: DefaultTaintPolicy(),
	}
}

// DefaultTaintPolicy taints NoSchedule under nodeward.io/ for every health
// condition.
func DefaultTaintPolicy() []TaintPolicy {
	row := func(c corev1.NodeConditionType, name string) TaintPolicy {
		return TaintPolicy{Condition: c, Key: v1alpha1.GroupName + "/" + name, Effect: corev1.TaintEffectNoSchedule}
	}
	return []TaintPolicy{
		row(v1alpha1.ConditionMemoryPressure, "memory-pressure"),
		row(v1alpha1.ConditionDiskPressure, "disk-pressure"),
		row(v1alpha1.ConditionPIDPressure, "pid-pressure"),
		row(v1alpha1.ConditionNetworkUnavailable, "network-unavailable"),
		row(v1alpha1.ConditionRuntimeUnavailable, "runtime-unavailable"),
	}
}

// LoadConfig reads a YAML file over the defaults. Unknown fields and invalid
// values are refused with the field and the value named.
func LoadConfig(path string) (Config, error) {
	data, err := os.ReadFile(path)
	if err != nil {
		return Config{}, fmt.Errorf("read config: %w", err)
	}
	cfg, err := ParseConfig(data)
	if err != nil {
		return Config{}, fmt.Errorf("config %s: %w", path, err)
	}
	return cfg, nil
}

// ParseConfig reads YAML over the defaults and validates the result.
func ParseConfig(data []byte) (Config, error) {
	cfg := DefaultConfig()
	if len(bytes.TrimSpace(data)) > 0 {
		// A list in the file replaces the default list whole.
		if err := yaml.UnmarshalStrict(data, &cfg); err != nil {
			return Config{}, fmt.Errorf("parse: %w", err)
		}
	}
	if err := cfg.Validate(); err != nil {
		return Config{}, err
	}
	return cfg, nil
}

// Validate refuses values the agent cannot run with, naming the field.
func (c *Config) Validate() error {
	var errs []string
	bad := func(field string, value any, why string) {
		errs = append(errs, fmt.Sprintf("%s: invalid value %q: %s", field, fmt.Sprint(value), why))
	}
	positive := func(field string, d metav1.Duration) {
		if d.Duration <= 0 {
			bad(field, d.Duration, "must be a positive duration")
		}
	}
	percent := func(field string, p float64) {
		if p < 0 || p > 100 || p != p {
			bad(field, p, "must be a percentage between 0 and 100")
		}
	}
	if c.ProcRoot == "" {
		bad("procRoot", c.ProcRoot, "must name a directory")
	}
	if c.MetricsAddress != "" {
		if _, _, err := net.SplitHostPort(c.MetricsAddress); err != nil {
			bad("metricsAddress", c.MetricsAddress, "must be host:port")
		}
	}
	if c.Hysteresis.BadSamples < 1 {
		bad("hysteresis.badSamples", c.Hysteresis.BadSamples, "must be at least 1")
	}
	if c.Hysteresis.QuietPeriod.Duration < 0 {
		bad("hysteresis.quietPeriod", c.Hysteresis.QuietPeriod.Duration, "must not be negative")
	}
	positive("heartbeatInterval", c.HeartbeatInterval)
	positive("leaseRenewInterval", c.LeaseRenewInterval)
	if c.LeaseRenewInterval.Duration >= v1alpha1.AgentLeaseDurationSeconds*time.Second {
		bad("leaseRenewInterval", c.LeaseRenewInterval.Duration, "must be shorter than the Lease duration ("+(v1alpha1.AgentLeaseDurationSeconds*time.Second).String()+")")
	}
	positive("memory.pollInterval", c.Memory.PollInterval)
	percent("memory.minAvailablePercent", c.Memory.MinAvailablePercent)
	percent("memory.psiSomeAvg10Percent", c.Memory.PSISomeAvg10Percent)
	percent("memory.psiFullAvg10Percent", c.Memory.PSIFullAvg10Percent)
	if c.Memory.Trigger != "" {
		if err := ValidatePSITrigger(c.Memory.Trigger); err != nil {
			bad("memory.trigger", c.Memory.Trigger, err.Error())
		}
	}
	positive("disk.pollInterval", c.Disk.PollInterval)
	percent("disk.minAvailablePercent", c.Disk.MinAvailablePercent)
	percent("disk.minInodesFreePercent", c.Disk.MinInodesFreePercent)
	if c.Disk.Enabled && len(c.Disk.Paths) == 0 {
		bad("disk.paths", "[]", "must list at least one path while the disk probe is enabled")
	}
	for i, p := range c.Disk.Paths {
		if !strings.HasPrefix(p, "/") {
			bad(fmt.Sprintf("disk.paths[%d]", i), p, "must be an absolute path")
		}
	}
	positive("pids.pollInterval", c.PIDs.PollInterval)
	percent("pids.maxUsedPercent", c.PIDs.MaxUsedPercent)
	switch c.Network.Family {
	case "ipv4", "ipv6", "any":
	default:
		bad("network.family", c.Network.Family, `must be "ipv4", "ipv6" or "any"`)
	}
	positive("network.relistInterval", c.Network.RelistInterval)
	positive("runtime.timeout", c.Runtime.Timeout)
	positive("runtime.pollInterval", c.Runtime.PollInterval)
	if c.Runtime.Enabled {
		if _, err := socketPath(c.Runtime.Endpoint); err != nil {
			bad("runtime.endpoint", c.Runtime.Endpoint, err.Error())
		}
	}
	c.validateTaints(bad)
	if len(errs) > 0 {
		return fmt.Errorf("invalid config: %s", strings.Join(errs, "; "))
	}
	return nil
}

func (c *Config) validateTaints(bad func(field string, value any, why string)) {
	known := map[corev1.NodeConditionType]bool{}
	for _, t := range v1alpha1.HealthConditions() {
		known[t] = true
	}
	seen := map[string]bool{}
	for i, p := range c.Taints {
		field := fmt.Sprintf("taints[%d]", i)
		if !known[p.Condition] {
			bad(field+".condition", p.Condition, "must be one of nodeward's health conditions")
		}
		if err := taints.ValidateKey(p.Key); err != nil {
			bad(field+".key", p.Key, err.Error())
		} else if reservedTaintKey(p.Key) {
			// Owning such a key would make nodeward remove the node
			// lifecycle controller's or the kubelet's taints.
			bad(field+".key", p.Key, "belongs to Kubernetes itself (kubernetes.io / k8s.io prefixes)")
		}
		if err := taints.ValidateValue(p.Value); err != nil {
			bad(field+".value", p.Value, err.Error())
		}
		if err := taints.ValidateEffect(p.Effect); err != nil {
			bad(field+".effect", p.Effect, err.Error())
		}
		id := p.Key + ":" + string(p.Effect)
		if seen[id] {
			bad(field, id, "duplicate key and effect")
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
