package node_test

import (
	"context"
	"errors"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"

	corev1 "k8s.io/api/core/v1"

	"github.com/nodeward/nodeward/test/cluster"
)

// testMustGatherLogs: `nodeward must-gather` reads the agent pod's log
// through the API from the real kubelet (kwok's nodes serve none):
// logs/<pod>/agent.log is in the archive, not empty, and the logs part
// has no error.
func testMustGatherLogs(ctx context.Context, t *testing.T, cp *cluster.ControlPlane, pod *corev1.Pod) {
	nodeward, err := cluster.NodewardBinary(cluster.ReleaseBuild)
	if err != nil {
		t.Fatal(err)
	}
	dest := filepath.Join(t.TempDir(), "mg")
	out, err := exec.CommandContext(ctx, nodeward, "must-gather", "--kubeconfig", cp.KubeconfigPath(), "--dest-dir", dest).CombinedOutput()
	var exit *exec.ExitError
	if err != nil && (!errors.As(err, &exit) || exit.ExitCode() != 2) {
		t.Fatalf("must-gather: %v\n%s", err, out)
	}
	for _, line := range strings.Split(string(out), "\n") {
		if strings.HasPrefix(line, "must-gather: logs ") && strings.Contains(line, "FAILED") {
			t.Errorf("the logs part failed on a real kubelet: %s", line)
		}
	}
	data, err := os.ReadFile(filepath.Join(dest, "logs", pod.Name, "agent.log"))
	if err != nil {
		t.Fatalf("the agent's log is not in the archive: %v\n%s", err, out)
	}
	log := string(data)
	if len(strings.TrimSpace(log)) == 0 {
		t.Errorf("logs/%s/agent.log is empty\n%s", pod.Name, out)
	}
	t.Logf("must-gather read %d bytes of %s's log; stderr:\n%s", len(log), pod.Name, out)
}
