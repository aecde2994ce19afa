package conditions

import (
	"fmt"
	"regexp"
	"strings"
	"testing"
)

const header = "apiVersion: nodeward.io/v1alpha1\nkind: AgentConfig\n"

// TestMalformedConfigNamesPathValueAndLine: every problem of a file is
// reported at once, each naming the field's path, the value and the line.
func TestMalformedConfigNamesPathValueAndLine(t *testing.T) {
	t.Parallel()
	type want struct {
		line        int
		path, value string
	}
	cases := []struct {
		name, yaml string
		want       []want
	}{
		{"type error", header + "memory:\n  minAvailablePercent: lots\n",
			[]want{{4, "memory.minAvailablePercent", "lots"}}},
		{"duration type", header + "heartbeatInterval: 5\n", []want{{3, "heartbeatInterval", "5"}}},
		{"bool type", header + "pids: {enabled: maybe}\n", []want{{3, "pids.enabled", "maybe"}}},
		{"string type", header + "network:\n  family: 4\n", []want{{4, "network.family", "4"}}},
		{"negative uint", header + "memory: {minAvailableBytes: -1}\n", []want{{3, "memory.minAvailableBytes", "-1"}}},
		{"int overflow", header + "hysteresis: {badSamples: 99999999999999999999}\n",
			[]want{{3, "hysteresis.badSamples", "99999999999999999999"}}},
		{"unknown field", header + "memroy: {enabled: false}\n", []want{{3, "memroy", "{enabled: false}"}}},
		{"nested unknown field", header + "disk:\n  enabled: true\n  pahts: [/]\n", []want{{5, "disk.pahts", "[/]"}}},
		{"wrong kind", "apiVersion: nodeward.io/v1alpha1\nkind: KubeletConfiguration\n",
			[]want{{2, "kind", "KubeletConfiguration"}}},
		{"wrong apiVersion", "apiVersion: v1\nkind: AgentConfig\n", []want{{1, "apiVersion", "v1"}}},
		{"kind without apiVersion", "kind: AgentConfig\n", []want{{1, "apiVersion", ""}}},
		{"two errors at once", header + "hysteresis:\n  badSamples: two\n  quietPeriod: soon\n",
			[]want{{4, "hysteresis.badSamples", "two"}, {5, "hysteresis.quietPeriod", "soon"}}},
		{"header and body at once", "apiVersion: v2\nkind: AgentConfig\nmemory: {trigger: 7}\n",
			[]want{{1, "apiVersion", "v2"}, {3, "memory.trigger", "7"}}},
		{"list item", header + "taints:\n- {condition: NodewardPIDPressure, key: a, effect: NoSchedule}\n- {condition: NodewardPIDPressure, kee: b, effect: NoSchedule}\n",
			[]want{{5, "taints[1].kee", "b"}}},
		{"not a list", header + "disk: {paths: /var}\n", []want{{3, "disk.paths", "/var"}}},
		{"not a mapping", header + "runtime: off\n", []want{{3, "runtime", "off"}}},
		{"duplicate field", header + "procRoot: /proc\nprocRoot: /host/proc\n", []want{{4, "procRoot", "/host/proc"}}},
		{"validation with line", header + "\nmemory:\n  trigger: 'some 1000 1000'\n",
			[]want{{5, "memory.trigger", "some 1000 1000"}}},
		{"validation in a list", header + "taints:\n- {condition: NodewardPIDPressure, key: a, effect: Never}\n",
			[]want{{4, "taints[0].effect", "Never"}}},
	}
	lineRE := regexp.MustCompile(`line \d+: `)
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			t.Parallel()
			_, err := ParseConfig([]byte(c.yaml))
			if err == nil {
				t.Fatalf("accepted:\n%s", c.yaml)
			}
			msg := err.Error()
			if n := len(lineRE.FindAllString(msg, -1)); n != len(c.want) {
				t.Errorf("%d errors, want %d: %s", n, len(c.want), msg)
			}
			for _, w := range c.want {
				line := fmt.Sprintf("line %d: %s: invalid value %q: ", w.line, w.path, w.value)
				if !strings.Contains(msg, line) {
					t.Errorf("error %q does not contain %q", msg, line)
				}
			}
		})
	}
}

func TestConfigHeader(t *testing.T) {
	t.Parallel()
	cfg := DefaultConfig()
	warnings, err := DecodeFile([]byte(header+"procRoot: /host/proc\n"), &cfg, cfg.Validate)
	if err != nil || len(warnings) != 0 || cfg.ProcRoot != "/host/proc" {
		t.Errorf("with header: %v, warnings %q, procRoot %q", err, warnings, cfg.ProcRoot)
	}
	// Files written before apiVersion and kind still load, with one
	// warning naming both lines to add.
	cfg = DefaultConfig()
	warnings, err = DecodeFile([]byte("procRoot: /host/proc\n"), &cfg, cfg.Validate)
	if err != nil || cfg.ProcRoot != "/host/proc" {
		t.Fatalf("without header: %v, procRoot %q", err, cfg.ProcRoot)
	}
	if len(warnings) != 1 || !strings.Contains(warnings[0], "apiVersion: nodeward.io/v1alpha1") || !strings.Contains(warnings[0], "kind: AgentConfig") {
		t.Errorf("warnings %q, want one naming both lines", warnings)
	}
	// YAML 1.1 booleans into a bool, null keeps the default, 0 is a
	// duration.
	cfg, err = ParseConfig([]byte(header + "runtime: {enabled: no, timeout: ~}\nmemory: {pollInterval: 0}\n"))
	if err == nil || !strings.Contains(err.Error(), "memory.pollInterval") {
		t.Errorf("pollInterval 0: %v, want the validation error", err)
	}
	cfg, err = ParseConfig([]byte(header + "runtime: {enabled: no, timeout: ~}\n"))
	if err != nil || cfg.Runtime.Enabled || cfg.Runtime.Timeout != DefaultConfig().Runtime.Timeout {
		t.Errorf("runtime %+v, %v", cfg.Runtime, err)
	}
	if _, err := ParseConfig([]byte("memory: {\n")); err == nil || !strings.Contains(err.Error(), "line") {
		t.Errorf("syntax error %v, want it with its line", err)
	}
}
