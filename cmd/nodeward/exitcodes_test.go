package main

import (
	"os"
	"path/filepath"
	"strings"
	"testing"
)

// writeProc writes a fake /proc with the pids probe's files: tasks used of
// pid_max.
func writeProc(t *testing.T, tasks, pidMax string) string {
	t.Helper()
	proc := t.TempDir()
	for name, content := range map[string]string{
		"loadavg": "0 0 0 1/" + tasks + " 5\n", "sys/kernel/pid_max": pidMax + "\n", "sys/kernel/threads-max": "90000\n",
	} {
		path := filepath.Join(proc, name)
		if err := os.MkdirAll(filepath.Dir(path), 0o755); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(path, []byte(content), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	return proc
}

// TestExitCodes: every command's usage and configuration errors have
// their own codes, distinct from the codes of its outcome (check's
// unhealthy and probe failed here; drain's blocked, timed out and refused
// and uncordon's cordoned-by-someone-else in TestDrainCommand and
// TestDrainKubectlFlags, against the real API server).
func TestExitCodes(t *testing.T) {
	t.Setenv("KUBECONFIG", filepath.Join(t.TempDir(), "none"))
	t.Setenv("HOME", t.TempDir())
	t.Setenv("KUBERNETES_SERVICE_HOST", "")
	cfg := filepath.Join(t.TempDir(), "config.yaml")
	if err := os.WriteFile(cfg, []byte("memory: {enabled: false}\ndisk: {enabled: false}\nnetwork: {enabled: false}\nruntime: {enabled: false}\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	missing := filepath.Join(t.TempDir(), "missing")
	badKube := "--kubeconfig=" + missing
	healthy, full, empty := writeProc(t, "100", "32768"), writeProc(t, "100", "100"), t.TempDir()
	for _, tc := range []struct {
		name string
		args []string
		want int
	}{
		{"unknown command", []string{"bogus"}, exitUsage},
		{"version: unknown flag", []string{"version", "--bogus"}, exitUsage},
		{"version: arguments", []string{"version", "extra"}, exitUsage},
		{"version: bad --log-format", []string{"version", "--log-format=xml"}, exitUsage},
		{"check: healthy", []string{"check", "--config", cfg, "--proc-root", healthy}, 0},
		{"check: unknown flag", []string{"check", "--bogus"}, exitUsage},
		{"check: bad value", []string{"check", "--bad-samples=many"}, exitUsage},
		{"check: config file missing", []string{"check", "--config", missing}, exitConfig},
		{"check: config invalid", []string{"check", "--config", cfg, "--bad-samples=0"}, exitConfig},
		{"check: unhealthy", []string{"check", "--config", cfg, "--proc-root", full}, 1},
		{"check: probe failed", []string{"check", "--config", cfg, "--proc-root", empty}, 2},
		{"agent: unknown flag", []string{"agent", "--bogus"}, exitUsage},
		{"agent: bad value", []string{"agent", "--image-transport=ftp"}, exitUsage},
		{"agent: no node name", []string{"agent", "--node-name="}, exitUsage},
		{"agent: config file missing", []string{"agent", "--node-name=n", "--config", missing}, exitConfig},
		{"agent: kubeconfig missing", []string{"agent", "--node-name=n", "--config", cfg, badKube}, exitConfig},
		{"agent: drain rules missing", []string{"agent", "--node-name=n", "--config", cfg, "--drain-rules", missing}, exitConfig},
		{"coordinator: arguments", []string{"coordinator", "extra"}, exitUsage},
		{"coordinator: bad value", []string{"coordinator", "--resync=0s"}, exitUsage},
		{"coordinator: kubeconfig missing", []string{"coordinator", badKube}, exitConfig},
		{"drain: no node", []string{"drain"}, exitUsage},
		{"drain: bad value", []string{"drain", "n", "--on-timeout=later"}, exitUsage},
		{"drain: rules missing", []string{"drain", "n", "--rules", missing}, exitConfig},
		{"drain: kubeconfig missing", []string{"drain", "n", badKube}, exitConfig},
		{"uncordon: no node", []string{"uncordon"}, exitUsage},
		{"uncordon: kubeconfig missing", []string{"uncordon", "n", badKube}, exitConfig},
		{"status: two pools", []string{"status", "a", "b"}, exitUsage},
		{"status: kubeconfig missing", []string{"status", badKube}, exitConfig},
	} {
		t.Run(tc.name, func(t *testing.T) {
			if out, code := run(t, tc.args...); code != tc.want {
				t.Errorf("nodeward %s: exit %d, want %d:\n%s", strings.Join(tc.args, " "), code, tc.want, out)
			}
		})
	}
}

// TestHelpListsExitCodes: every command's --help lists its exit codes.
func TestHelpListsExitCodes(t *testing.T) {
	for _, cmd := range newRootCommand().Commands() {
		if cmd.Name() == "help" || cmd.Name() == "completion" {
			continue
		}
		out, code := run(t, cmd.Name(), "--help")
		if code != 0 || !strings.Contains(out, "Exit codes:") || !strings.Contains(out, "64 usage error") ||
			!strings.Contains(out, "78 configuration error") {
			t.Errorf("nodeward %s --help: exit %d, no exit codes:\n%s", cmd.Name(), code, out)
		}
	}
}
