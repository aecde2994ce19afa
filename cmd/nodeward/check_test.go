package main

import (
	"bytes"
	"os"
	"path/filepath"
	"strings"
	"testing"
)

// TestCheckTakesOnlyWhatItUses: check reads the agent's file (agent keys
// included) and the health flags, and refuses the agent's own flags instead
// of ignoring them.
func TestCheckTakesOnlyWhatItUses(t *testing.T) {
	proc := t.TempDir()
	for name, content := range map[string]string{
		"loadavg": "0 0 0 1/100 5\n", "sys/kernel/pid_max": "32768\n", "sys/kernel/threads-max": "90000\n",
	} {
		path := filepath.Join(proc, name)
		if err := os.MkdirAll(filepath.Dir(path), 0o755); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(path, []byte(content), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	cfgPath := filepath.Join(t.TempDir(), "config.yaml")
	cfg := "metricsAddress: 127.0.0.1:9741\nleaseRenewInterval: 80s\n" +
		"memory: {enabled: false}\ndisk: {enabled: false}\nnetwork: {enabled: false}\nruntime: {enabled: false}\n"
	if err := os.WriteFile(cfgPath, []byte(cfg), 0o600); err != nil {
		t.Fatal(err)
	}
	run := func(args ...string) (string, error) {
		var out bytes.Buffer
		cmd := newRootCommand()
		cmd.SetOut(&out)
		cmd.SetErr(&out)
		cmd.SetArgs(args)
		err := cmd.Execute()
		return out.String(), err
	}
	out, err := run("check", "--config", cfgPath, "--proc-root", proc)
	if err != nil || !strings.Contains(out, "NodewardPIDPressure") || !strings.Contains(out, "Taints that would follow: none") {
		t.Fatalf("check with the agent's file: %v\n%s", err, out)
	}
	for _, flag := range []string{"--metrics-address=127.0.0.1:1", "--textfile-directory=/tmp"} {
		if _, err := run("check", "--config", cfgPath, "--proc-root", proc, flag); err == nil || !strings.Contains(err.Error(), "unknown flag") {
			t.Errorf("check %s: %v, want an unknown flag", flag, err)
		}
	}
	agent, _, err := newRootCommand().Find([]string{"agent"})
	if err != nil {
		t.Fatal(err)
	}
	for _, flag := range []string{"metrics-address", "textfile-directory", "proc-root", "config"} {
		if agent.Flags().Lookup(flag) == nil {
			t.Errorf("agent lacks --%s", flag)
		}
	}
}

// TestCheckBadConfig: a malformed file exits 78 with every problem named,
// with its line; a file without apiVersion and kind runs with one warning.
func TestCheckBadConfig(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	bad := filepath.Join(dir, "bad.yaml")
	if err := os.WriteFile(bad, []byte("apiVersion: nodeward.io/v1alpha1\nkind: KubeletConfiguration\n"+
		"memory:\n  minAvailablePercent: lots\nmetricsAdress: 1.2.3.4:9\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	out, code := run(t, "check", "--config", bad)
	if code != exitConfig {
		t.Errorf("exit %d, want %d\n%s", code, exitConfig, out)
	}
	for _, want := range []string{
		`line 2: kind: invalid value "KubeletConfiguration": must be AgentConfig`,
		`line 4: memory.minAvailablePercent: invalid value "lots": must be a number`,
		`line 5: metricsAdress: invalid value "1.2.3.4:9": unknown field`,
	} {
		if !strings.Contains(out, want) {
			t.Errorf("output lacks %q:\n%s", want, out)
		}
	}
	old := filepath.Join(dir, "old.yaml")
	if err := os.WriteFile(old, []byte("memory: {enabled: false}\ndisk: {enabled: false}\npids: {enabled: false}\n"+
		"network: {enabled: false}\nruntime: {enabled: false}\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	out, code = run(t, "check", "--config", old)
	if code != 0 || strings.Count(out, "kind: AgentConfig") != 1 || !strings.Contains(out, "level=WARN") {
		t.Errorf("old file: exit %d, want 0 and one warning naming the lines to add:\n%s", code, out)
	}
}
