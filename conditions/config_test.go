package conditions

import (
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"

	"github.com/nodeward/nodeward/api/v1alpha1"
)

func TestDefaultConfigIsValidAndTaintsUnderNodewardIO(t *testing.T) {
	t.Parallel()
	cfg := DefaultConfig()
	if err := cfg.Validate(); err != nil {
		t.Fatalf("default config invalid: %v", err)
	}
	if len(cfg.Taints) != len(v1alpha1.HealthConditions()) {
		t.Fatalf("default policy has %d rows, want one per health condition", len(cfg.Taints))
	}
	for _, row := range cfg.Taints {
		if !strings.HasPrefix(row.Key, "nodeward.io/") || row.Effect != corev1.TaintEffectNoSchedule {
			t.Errorf("default row %+v: want a nodeward.io/ key with NoSchedule", row)
		}
	}
	if cfg.Hysteresis.QuietPeriod.Duration != 5*time.Minute || cfg.Hysteresis.BadSamples != 1 {
		t.Errorf("default hysteresis %+v, want 1 bad sample and 5m", cfg.Hysteresis)
	}
}

func TestParseConfigOverridesDefaults(t *testing.T) {
	t.Parallel()
	cfg, err := ParseConfig([]byte(`
procRoot: /host/proc
hysteresis: {badSamples: 3, quietPeriod: 2s}
disk:
  paths: [/var]
  minAvailablePercent: 20
network: {family: ipv6, interface: eth1}
runtime: {enabled: false}
taints:
- {condition: NodewardDiskPressure, key: example.com/disk, value: full, effect: PreferNoSchedule}
`))
	if err != nil {
		t.Fatal(err)
	}
	if cfg.ProcRoot != "/host/proc" || cfg.Hysteresis.BadSamples != 3 || cfg.Hysteresis.QuietPeriod.Duration != 2*time.Second {
		t.Errorf("top-level fields not applied: %+v", cfg)
	}
	if len(cfg.Disk.Paths) != 1 || cfg.Disk.MinAvailablePercent != 20 || cfg.Disk.MinInodesFreePercent != 5 {
		t.Errorf("disk: %+v (unset fields must keep defaults)", cfg.Disk)
	}
	if cfg.Network.Family != "ipv6" || cfg.Runtime.Enabled || len(cfg.Taints) != 1 || cfg.Taints[0].Value != "full" {
		t.Errorf("network/runtime/taints not applied: %+v %+v %+v", cfg.Network, cfg.Runtime, cfg.Taints)
	}
}

// TestInvalidConfigNamesFieldAndValue: every refusal says which field and
// which value.
func TestInvalidConfigNamesFieldAndValue(t *testing.T) {
	t.Parallel()
	cases := []struct{ yaml, field, value string }{
		{"hysteresis: {badSamples: 0}", "hysteresis.badSamples", "0"},
		{"hysteresis: {quietPeriod: -1s}", "hysteresis.quietPeriod", "-1s"},
		{"memory: {minAvailablePercent: 150}", "memory.minAvailablePercent", "150"},
		{"memory: {trigger: 'some 1000 1000'}", "memory.trigger", "some 1000 1000"},
		{"disk: {paths: [relative/path]}", "disk.paths[0]", "relative/path"},
		{"network: {family: ipx}", "network.family", "ipx"},
		{"runtime: {endpoint: 'tcp://x:1'}", "runtime.endpoint", "tcp://x:1"},
		{"taints: [{condition: MemoryPressure, key: a, effect: NoSchedule}]", "taints[0].condition", "MemoryPressure"},
		{"taints: [{condition: NodewardPIDPressure, key: 'bad key', effect: NoSchedule}]", "taints[0].key", "bad key"},
		{"taints: [{condition: NodewardPIDPressure, key: node.kubernetes.io/pid-pressure, effect: NoSchedule}]", "taints[0].key", "node.kubernetes.io/pid-pressure"},
		{"taints: [{condition: NodewardPIDPressure, key: a, effect: Never}]", "taints[0].effect", "Never"},
		{"taints: [{condition: NodewardPIDPressure, key: a, value: 'x y', effect: NoSchedule}]", "taints[0].value", "x y"},
	}
	for _, c := range cases {
		_, err := ParseConfig([]byte(c.yaml))
		if err == nil {
			t.Errorf("%s: accepted", c.yaml)
			continue
		}
		if !strings.Contains(err.Error(), c.field) || !strings.Contains(err.Error(), `"`+c.value+`"`) {
			t.Errorf("%s: error %q does not name field %s and value %q", c.yaml, err, c.field, c.value)
		}
	}
	// The agent's own settings are not the health part's: daemon.FileConfig
	// reads them.
	for _, agentOnly := range []string{"metricsAddress: 127.0.0.1:1", "textfileDirectory: /tmp", "leaseRenewInterval: 80s"} {
		if _, err := ParseConfig([]byte(agentOnly)); err == nil {
			t.Errorf("%s: accepted by the health part", agentOnly)
		}
	}
	if _, err := ParseConfig([]byte("memroy: {enabled: false}")); err == nil || !strings.Contains(err.Error(), "memroy") {
		t.Errorf("unknown field: %v, want a refusal naming it", err)
	}
}

// FuzzParseConfig: whatever is accepted validates and is usable: the probes
// build and the policy table only holds valid taints.
func FuzzParseConfig(f *testing.F) {
	for _, s := range []string{"", "hysteresis: {badSamples: 2}", "disk: {paths: [/]}",
		"taints: [{condition: NodewardDiskPressure, key: a/b, effect: NoSchedule}]", "memory: {trigger: 'full 1 500000'}", "{"} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, s string) {
		cfg, err := ParseConfig([]byte(s))
		if err != nil {
			return
		}
		if err := cfg.Validate(); err != nil {
			t.Fatalf("accepted config fails validation: %v", err)
		}
		if cfg.Hysteresis.BadSamples < 1 || cfg.HeartbeatInterval.Duration <= 0 {
			t.Fatalf("accepted unusable config %+v", cfg)
		}
		_ = Probes(cfg, nil)
	})
}
