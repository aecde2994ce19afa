package main

import (
	"bytes"
	"context"
	"encoding/json"
	"strings"
	"testing"
	"time"
)

// runFor runs the CLI in-process until it returns or d passes (then its
// context ends, as on SIGTERM).
func runFor(t *testing.T, d time.Duration, args ...string) (string, int) {
	t.Helper()
	ctx, cancel := context.WithTimeout(t.Context(), d)
	defer cancel()
	var out bytes.Buffer
	cmd := newRootCommand()
	cmd.SetOut(&out)
	cmd.SetErr(&out)
	cmd.SetArgs(args)
	err := cmd.ExecuteContext(ctx)
	if err != nil {
		out.WriteString("error: " + err.Error() + "\n")
		return out.String(), rootExitCode(cmd, err)
	}
	return out.String(), 0
}

// deadServer is an API server address where nothing listens.
const deadServer = "https://127.0.0.1:1"

// TestDeadAPIServerIsNamed: the agent and the coordinator (with and
// without leader election) warn, naming the server and the error, when
// they cannot sync with the API server.
func TestDeadAPIServerIsNamed(t *testing.T) {
	kubeconfig := "--kubeconfig=" + writeKubeconfig(t, deadServer)
	for name, args := range map[string][]string{
		"agent": {"agent", kubeconfig, "--node-name=n1", "--updates=false", "--metrics-address=",
			"--sync-warning-interval=300ms"},
		"coordinator": {"coordinator", kubeconfig, "--metrics-address=", "--leader-elect=false",
			"--sync-warning-interval=300ms"},
		"coordinator with leader election": {"coordinator", kubeconfig, "--metrics-address=",
			"--sync-warning-interval=300ms", "--leader-lease-duration=3s"},
	} {
		t.Run(name, func(t *testing.T) {
			out, _ := runFor(t, 2*time.Second, args...)
			var warning string
			for _, line := range strings.Split(out, "\n") {
				if strings.Contains(line, "level=WARN") && strings.Contains(line, "not synced with the API server") {
					warning = line
					break
				}
			}
			if warning == "" || !strings.Contains(warning, "server="+deadServer) || !strings.Contains(warning, "connection refused") {
				t.Fatalf("no warning naming %s and the error:\n%s", deadServer, out)
			}
		})
	}
}

// TestLogFlagsChangeOutput: --log-format=json writes JSON lines and -v
// raises client-go's verbosity (its request lines appear), on the same
// logger; a bad --log-format is refused when parsed.
func TestLogFlagsChangeOutput(t *testing.T) {
	kubeconfig := "--kubeconfig=" + writeKubeconfig(t, deadServer)
	base := []string{"coordinator", kubeconfig, "--metrics-address=", "--leader-elect=false", "--sync-warning-interval=300ms"}

	out, _ := runFor(t, time.Second, append(base, "--log-format=json")...)
	lines := 0
	for _, line := range strings.Split(strings.TrimSpace(out), "\n") {
		if strings.HasPrefix(line, "error: ") {
			continue
		}
		var rec map[string]any
		if err := json.Unmarshal([]byte(line), &rec); err != nil {
			t.Fatalf("--log-format=json: line %q is not JSON: %v", line, err)
		}
		lines++
	}
	if lines == 0 {
		t.Fatal("--log-format=json: no log line")
	}

	quiet, _ := runFor(t, time.Second, base...)
	loud, _ := runFor(t, time.Second, append(base, "-v", "6")...)
	const request = "verb=GET"
	if strings.Contains(quiet, request) || !strings.Contains(loud, request) {
		t.Fatalf("-v 6 should add client-go's request lines (%q)\nwithout:\n%s\nwith:\n%s", request, quiet, loud)
	}
	if !strings.Contains(loud, "level=WARN") || strings.Contains(loud, "{") && strings.HasPrefix(loud, "{") {
		t.Fatalf("-v 6: want text lines of the same logger:\n%s", loud)
	}
}
