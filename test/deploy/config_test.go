package deploy_test

import (
	"os"
	"path/filepath"
	"testing"

	corev1 "k8s.io/api/core/v1"
	"sigs.k8s.io/yaml"

	"github.com/nodeward/nodeward/daemon"
)

// TestConfigExamples: the host-mode example and the DaemonSet's ConfigMap
// both load with the agent's own parser, which refuses unknown fields and
// invalid values.
func TestConfigExamples(t *testing.T) {
	t.Parallel()
	if _, warnings, err := daemon.LoadFileConfig(filepath.Join(manifestsDir(t), "host", "config.yaml")); err != nil || len(warnings) > 0 {
		t.Errorf("manifests/host/config.yaml: %v, warnings %q (apiVersion and kind are required)", err, warnings)
	}
	data, err := os.ReadFile(filepath.Join(manifestsDir(t), "base", "agent-config.yaml"))
	if err != nil {
		t.Fatal(err)
	}
	var cm corev1.ConfigMap
	if err := yaml.UnmarshalStrict(data, &cm); err != nil {
		t.Fatalf("manifests/base/agent-config.yaml: %v", err)
	}
	cfg, warnings, err := daemon.ParseFileConfig([]byte(cm.Data["config.yaml"]))
	if err != nil || len(warnings) > 0 {
		t.Fatalf("the DaemonSet's config.yaml: %v, warnings %q (apiVersion and kind are required)", err, warnings)
	}
	if cfg.ProcRoot != "/host/proc" || cfg.MetricsAuth != "kubernetes" {
		t.Errorf("DaemonSet config: procRoot %q, metricsAuth %q; the pod spec mounts the host's /proc at /host/proc, and /metrics on the node's address must need a token",
			cfg.ProcRoot, cfg.MetricsAuth)
	}
}

// TestKernelEventsConfig: components/kernel-events' config loads with the
// agent's parser and turns the kernel log and the OOM kills on, the cgroups
// looked for in the host's cgroup filesystem the component mounts.
func TestKernelEventsConfig(t *testing.T) {
	t.Parallel()
	data, err := os.ReadFile(filepath.Join(manifestsDir(t), "components", "kernel-events", "agent-config.yaml"))
	if err != nil {
		t.Fatal(err)
	}
	var cm corev1.ConfigMap
	if err := yaml.UnmarshalStrict(data, &cm); err != nil {
		t.Fatalf("components/kernel-events/agent-config.yaml: %v", err)
	}
	cfg, warnings, err := daemon.ParseFileConfig([]byte(cm.Data["config.yaml"]))
	if err != nil || len(warnings) > 0 {
		t.Fatalf("components/kernel-events' config.yaml: %v, warnings %q", err, warnings)
	}
	if !cfg.Kernel.Enabled || !cfg.OOMKills.Enabled || cfg.OOMKills.CgroupFS != "/host/sys/fs/cgroup" || cfg.ProcRoot != "/host/proc" {
		t.Errorf("components/kernel-events' config: kernel %v, oomKills %+v, procRoot %q; want both on, cgroupFS /host/sys/fs/cgroup, procRoot /host/proc",
			cfg.Kernel.Enabled, cfg.OOMKills, cfg.ProcRoot)
	}
}
