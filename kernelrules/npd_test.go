package kernelrules

import (
	"context"
	"encoding/json"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"reflect"
	"slices"
	"testing"
	"time"
)

// npdModule is a released node-problem-detector whose module zip carries
// config/kernel-monitor.json and config/readonly-monitor.json.
const npdModule = "k8s.io/node-problem-detector@v1.36.0"

// TestNPDDefaultRuleFilesLoadUnchanged parses NPD's own kmsg rule files as
// NPD ships them. They are fetched with the go command into the module
// cache, never copied into this repository.
func TestNPDDefaultRuleFilesLoadUnchanged(t *testing.T) {
	dir := downloadModule(t, npdModule)

	kernel := parseFileIn(t, dir, "config/kernel-monitor.json")
	if kernel.Source != "kernel-monitor" || kernel.BufferSize != 10 || kernel.LookbackDuration() != 5*time.Minute {
		t.Errorf("kernel-monitor.json: source %q, bufferSize %d, lookback %v", kernel.Source, kernel.BufferSize, kernel.Lookback)
	}
	if len(kernel.Rules) != 14 {
		t.Errorf("kernel-monitor.json has %d rules, want the 14 of %s", len(kernel.Rules), npdModule)
	}
	reasons := reasonsOf(kernel)
	for _, want := range []string{"OOMKilling", "TaskHung", "KernelOops", "Ext4Error", "IOError", "KernelDeadlock/DockerHung", "XfsShutdown/XfsHasShutdown"} {
		if !slices.Contains(reasons, want) {
			t.Errorf("kernel-monitor.json reasons %q lack %q", reasons, want)
		}
	}

	readonly := parseFileIn(t, dir, "config/readonly-monitor.json")
	if got, want := reasonsOf(readonly), []string{"ReadonlyFilesystem/FilesystemIsReadOnly"}; !reflect.DeepEqual(got, want) {
		t.Errorf("readonly-monitor.json reasons %q, want %q", got, want)
	}

	// NPD's rules behave here as they do in NPD: a hung docker is both a
	// TaskHung event and the KernelDeadlock condition.
	matches := NewMatcher(kernel, readonly).Match("INFO: task docker:1234 blocked for more than 120 seconds.")
	var got []string
	for _, match := range matches {
		got = append(got, match.Source+":"+describe(match))
	}
	if want := []string{"kernel-monitor:TaskHung", "kernel-monitor:KernelDeadlock/DockerHung"}; !reflect.DeepEqual(got, want) {
		t.Errorf("hung docker matched %q, want %q", got, want)
	}
}

func reasonsOf(file *File) []string {
	var reasons []string
	for _, rule := range file.Rules {
		reasons = append(reasons, describe(Match{Rule: rule}))
	}
	return reasons
}

func parseFileIn(t *testing.T, dir, name string) *File {
	t.Helper()
	data, err := os.ReadFile(filepath.Join(dir, name))
	if err != nil {
		t.Fatalf("reading %s from %s: %v", name, npdModule, err)
	}
	file, err := Parse(filepath.Base(name), data)
	if err != nil {
		t.Fatalf("NPD's own %s does not parse: %v", name, err)
	}
	return file
}

// downloadModule fetches module@version with `go mod download -json` and
// returns its directory in the module cache. Without the go command or the
// network the test skips, unless CI is set: there it must run.
func downloadModule(t *testing.T, module string) string {
	t.Helper()
	goBin, err := exec.LookPath("go")
	if err != nil {
		skipUnlessCI(t, "the go command is not on PATH, so %s cannot be downloaded: %v", module, err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
	defer cancel()
	cmd := exec.CommandContext(ctx, goBin, "mod", "download", "-json", module)
	// Outside this module, so go.mod and go.sum stay as they are.
	cmd.Dir = t.TempDir()
	out, runErr := cmd.Output()
	var result struct{ Dir, Error string }
	if err := json.Unmarshal(out, &result); err != nil || result.Error != "" || result.Dir == "" {
		skipUnlessCI(t, "go mod download %s failed (run error: %v; reported: %q; decode: %v)", module, runErr, result.Error, err)
	}
	return result.Dir
}

func skipUnlessCI(t *testing.T, format string, args ...any) {
	t.Helper()
	reason := fmt.Sprintf(format, args...)
	if os.Getenv("CI") != "" {
		t.Fatalf("%s (CI is set, so this test may not skip)", reason)
	}
	t.Skip(reason)
}
