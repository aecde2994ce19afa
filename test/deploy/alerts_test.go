package deploy_test

import (
	"bytes"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strings"
	"testing"

	"sigs.k8s.io/yaml"

	"github.com/nodeward/nodeward/test/testenv"
)

// ruleGroups is the spec of a PrometheusRule: Prometheus's own rule file.
type ruleGroups struct {
	Groups []struct {
		Name  string `json:"name"`
		Rules []struct {
			Alert       string            `json:"alert"`
			Labels      map[string]string `json:"labels"`
			Annotations map[string]string `json:"annotations"`
		} `json:"rules"`
	} `json:"groups"`
}

// rulesFile extracts the spec of every PrometheusRule in
// components/monitoring/prometheusrule.yaml into one Prometheus rule file
// in dir (promtool reads rule groups, not Kubernetes objects) and returns
// the raw groups too.
func rulesFile(t *testing.T, dir string) []ruleGroups {
	t.Helper()
	data, err := os.ReadFile(filepath.Join(manifestsDir(t), "components", "monitoring", "prometheusrule.yaml"))
	if err != nil {
		t.Fatal(err)
	}
	var all []any
	var parsed []ruleGroups
	for _, doc := range regexp.MustCompile(`(?m)^---\s*$`).Split(string(data), -1) {
		var obj struct {
			Kind string         `json:"kind"`
			Spec map[string]any `json:"spec"`
		}
		if err := yaml.Unmarshal([]byte(doc), &obj); err != nil {
			t.Fatal(err)
		}
		if obj.Kind != "PrometheusRule" {
			continue
		}
		all = append(all, obj.Spec["groups"].([]any)...)
		spec, _ := yaml.Marshal(obj.Spec)
		var g ruleGroups
		if err := yaml.Unmarshal(spec, &g); err != nil {
			t.Fatal(err)
		}
		parsed = append(parsed, g)
	}
	out, err := yaml.Marshal(map[string]any{"groups": all})
	if err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(dir, "nodeward-rules.yaml"), out, 0o600); err != nil {
		t.Fatal(err)
	}
	return parsed
}

// TestAlertRules runs `promtool check rules` and `promtool test rules` on
// the alerts: the unit tests in components/monitoring/tests/ (a window
// wait or a paused pool does not fire NodewardPoolStuck, a rollback fires
// NodewardNodeRolledBack, a planned reboot does not page, …).
func TestAlertRules(t *testing.T) {
	promtool := testenv.RequireBinary(t, "promtool") // Debian package prometheus
	dir := t.TempDir()
	rulesFile(t, dir)
	tests, err := filepath.Glob(filepath.Join(manifestsDir(t), "components", "monitoring", "tests", "*.yaml"))
	if err != nil || len(tests) == 0 {
		t.Fatalf("no rule tests under components/monitoring/tests: %v", err)
	}
	run := func(args ...string) {
		cmd := exec.Command(promtool, args...)
		cmd.Dir = dir
		if out, err := cmd.CombinedOutput(); err != nil {
			t.Errorf("promtool %s: %v\n%s", strings.Join(args, " "), err, out)
		}
	}
	run("check", "rules", "nodeward-rules.yaml")
	for _, src := range tests {
		data, err := os.ReadFile(src)
		if err != nil {
			t.Fatal(err)
		}
		// The test names its rule file nodeward-rules.yaml, next to it.
		name := filepath.Base(src)
		if err := os.WriteFile(filepath.Join(dir, name), data, 0o600); err != nil {
			t.Fatal(err)
		}
		run("test", "rules", name)
	}
}

// TestEveryAlertHasARunbookAndATest: each alert links its section of
// docs/runbooks.md, and the rule tests name each alert.
func TestEveryAlertHasARunbookAndATest(t *testing.T) {
	runbooks, err := os.ReadFile(filepath.Join(manifestsDir(t), "..", "docs", "runbooks.md"))
	if err != nil {
		t.Fatal(err)
	}
	tests, _ := filepath.Glob(filepath.Join(manifestsDir(t), "components", "monitoring", "tests", "*.yaml"))
	var testText []byte
	for _, f := range tests {
		b, _ := os.ReadFile(f)
		testText = append(testText, b...)
	}
	const prefix = "https://github.com/nodeward/nodeward/blob/main/docs/runbooks.md#"
	for _, g := range rulesFile(t, t.TempDir()) {
		for _, group := range g.Groups {
			for _, r := range group.Rules {
				if r.Alert == "" {
					continue
				}
				url := r.Annotations["runbook_url"]
				anchor, ok := strings.CutPrefix(url, prefix)
				if !ok || anchor != strings.ToLower(r.Alert) {
					t.Errorf("%s: runbook_url %q, want %s%s", r.Alert, url, prefix, strings.ToLower(r.Alert))
				}
				if !bytes.Contains(runbooks, []byte("\n## "+r.Alert+"\n")) {
					t.Errorf("%s: docs/runbooks.md has no section \"## %s\"", r.Alert, r.Alert)
				}
				if !bytes.Contains(testText, []byte("alertname: "+r.Alert+"\n")) {
					t.Errorf("%s: no promtool rule test under components/monitoring/tests", r.Alert)
				}
				if s := r.Labels["severity"]; s != "warning" && s != "critical" {
					t.Errorf("%s: severity %q", r.Alert, s)
				}
			}
		}
	}
}
