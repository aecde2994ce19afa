package daemon

import (
	"net"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/nodeward/nodeward/api/v1alpha1"
	"github.com/nodeward/nodeward/conditions"
	"github.com/nodeward/nodeward/daemon/health"
)

func TestDefaultFileConfigIsValid(t *testing.T) {
	t.Parallel()
	cfg := DefaultFileConfig()
	if err := cfg.Validate(); err != nil {
		t.Fatalf("default config invalid: %v", err)
	}
	if cfg.MetricsAddress != "127.0.0.1:9741" || cfg.TextfileDirectory != "" || cfg.LeaseRenewInterval.Duration != 80*time.Second {
		t.Errorf("agent defaults: metricsAddress %q, textfileDirectory %q, leaseRenewInterval %v",
			cfg.MetricsAddress, cfg.TextfileDirectory, cfg.LeaseRenewInterval.Duration)
	}
}

// TestFileConfigKeepsOneTopLevel: the agent's settings and the health
// configuration share the file's top level, as in the shipped examples.
func TestFileConfigKeepsOneTopLevel(t *testing.T) {
	t.Parallel()
	cfg, _, err := ParseFileConfig([]byte(`
procRoot: /host/proc
metricsAddress: 127.0.0.1:9999
textfileDirectory: /var/lib/node_exporter/textfile_collector
leaseRenewInterval: 30s
heartbeatInterval: 1m
hysteresis: {badSamples: 3}
pids: {maxUsedPercent: 50}
`))
	if err != nil {
		t.Fatal(err)
	}
	if cfg.ProcRoot != "/host/proc" || cfg.MetricsAddress != "127.0.0.1:9999" ||
		cfg.TextfileDirectory != "/var/lib/node_exporter/textfile_collector" || cfg.LeaseRenewInterval.Duration != 30*time.Second ||
		cfg.HeartbeatInterval.Duration != time.Minute || cfg.Hysteresis.BadSamples != 3 || cfg.PIDs.MaxUsedPercent != 50 {
		t.Errorf("fields not applied: %+v", cfg)
	}
	if cfg.Disk.MinAvailablePercent != 10 || len(cfg.Taints) != len(v1alpha1.HealthConditions()) {
		t.Errorf("unset fields must keep defaults: disk %+v, %d taint rows", cfg.Disk, len(cfg.Taints))
	}
	if _, _, err := LoadFileConfig(filepath.Join("..", "manifests", "host", "config.yaml")); err != nil {
		t.Errorf("manifests/host/config.yaml: %v", err)
	}
}

// TestInvalidFileConfigNamesFieldAndValue: every refusal says which field
// and which value, whichever part of the file holds it.
func TestInvalidFileConfigNamesFieldAndValue(t *testing.T) {
	t.Parallel()
	cases := []struct{ yaml, field, value string }{
		{"metricsAddress: nope", "metricsAddress", "nope"},
		{"leaseRenewInterval: 5m", "leaseRenewInterval", "5m0s"},
		{"leaseRenewInterval: 0s", "leaseRenewInterval", "0s"},
		{"hysteresis: {badSamples: 0}", "hysteresis.badSamples", "0"},
		{"heartbeatInterval: 0s", "heartbeatInterval", "0s"},
		{"memory: {minAvailablePercent: 150}", "memory.minAvailablePercent", "150"},
		{"disk: {paths: [relative/path]}", "disk.paths[0]", "relative/path"},
		{"runtime: {endpoint: 'tcp://x:1'}", "runtime.endpoint", "tcp://x:1"},
		{"taints: [{condition: NodewardPIDPressure, key: a, effect: Never}]", "taints[0].effect", "Never"},
	}
	for _, c := range cases {
		_, _, err := ParseFileConfig([]byte(c.yaml))
		if err == nil {
			t.Errorf("%s: accepted", c.yaml)
			continue
		}
		if !strings.Contains(err.Error(), c.field) || !strings.Contains(err.Error(), `"`+c.value+`"`) {
			t.Errorf("%s: error %q does not name field %s and value %q", c.yaml, err, c.field, c.value)
		}
	}
	for _, unknown := range []string{"memroy", "metricsAdress"} {
		if _, _, err := ParseFileConfig([]byte(unknown + ": {}")); err == nil || !strings.Contains(err.Error(), unknown) {
			t.Errorf("unknown field %s: %v, want a refusal naming it", unknown, err)
		}
	}
}

func TestLoadFileConfig(t *testing.T) {
	t.Parallel()
	path := filepath.Join(t.TempDir(), "nodeward.yaml")
	if err := os.WriteFile(path, []byte("pids: {maxUsedPercent: 50}\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	cfg, _, err := LoadFileConfig(path)
	if err != nil || cfg.PIDs.MaxUsedPercent != 50 {
		t.Fatalf("LoadFileConfig = %+v, %v", cfg.PIDs, err)
	}
	if _, _, err := LoadFileConfig(filepath.Join(t.TempDir(), "missing.yaml")); err == nil {
		t.Error("missing file accepted")
	}
}

// FuzzParseFileConfig: whatever is accepted validates and is usable: the
// agent's address and Lease interval are, the probes build and the policy
// table only holds valid taints.
func FuzzParseFileConfig(f *testing.F) {
	for _, s := range []string{"", "metricsAddress: ''", "leaseRenewInterval: 1s", "textfileDirectory: /x",
		"hysteresis: {badSamples: 2}", "taints: [{condition: NodewardDiskPressure, key: a/b, effect: NoSchedule}]", "{"} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, s string) {
		cfg, _, err := ParseFileConfig([]byte(s))
		if err != nil {
			return
		}
		if err := cfg.Validate(); err != nil {
			t.Fatalf("accepted config fails validation: %v", err)
		}
		if cfg.MetricsAddress != "" {
			if _, _, err := net.SplitHostPort(cfg.MetricsAddress); err != nil {
				t.Fatalf("accepted metricsAddress %q: %v", cfg.MetricsAddress, err)
			}
		}
		if err := health.CheckLeaseRenewInterval(cfg.LeaseRenewInterval.Duration); err != nil {
			t.Fatalf("accepted leaseRenewInterval %v: %v", cfg.LeaseRenewInterval.Duration, err)
		}
		if cfg.Hysteresis.BadSamples < 1 || cfg.HeartbeatInterval.Duration <= 0 {
			t.Fatalf("accepted unusable config %+v", cfg)
		}
		conditions.Close(conditions.Probes(cfg.Config, nil))
	})
}

func TestMetricsAuthFileConfig(t *testing.T) {
	t.Parallel()
	cfg, _, err := ParseFileConfig([]byte("metricsAuth: kubernetes\nmetricsTLSCertFile: /tls/tls.crt\nmetricsTLSKeyFile: /tls/tls.key\n"))
	if err != nil {
		t.Fatal(err)
	}
	if c := cfg.MetricsAuthConfig(); c.Mode != "kubernetes" || c.CertFile != "/tls/tls.crt" || c.KeyFile != "/tls/tls.key" {
		t.Errorf("metrics auth config %+v", c)
	}
	if d := DefaultFileConfig(); d.MetricsAuth != "none" {
		t.Errorf("default metricsAuth %q, want none (loopback, host service)", d.MetricsAuth)
	}
	for _, bad := range []string{"metricsAuth: basic", "metricsTLSCertFile: /tls/tls.crt"} {
		if _, _, err := ParseFileConfig([]byte(bad)); err == nil {
			t.Errorf("%q accepted", bad)
		}
	}
}
