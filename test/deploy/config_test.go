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
