package node_test

import (
	"strings"
	"testing"

	corev1 "k8s.io/api/core/v1"

	"github.com/nodeward/nodeward/test/cluster"
)

// testMustGatherLogs: `nodeward must-gather` reads the agent pod's log
// through the API from the real kubelet (kwok's nodes serve none):
// logs/<pod>/agent.log is in the archive, not empty, and the logs part
// has no error.
func testMustGatherLogs(t *testing.T, cp *cluster.ControlPlane, pod *corev1.Pod) {
	g := cp.MustGather(t)
	for _, line := range strings.Split(g.Progress, "\n") {
		if strings.HasPrefix(line, "must-gather: logs ") && strings.Contains(line, "FAILED") {
			t.Errorf("the logs part failed on a real kubelet: %s", line)
		}
	}
	log := string(g.File(t, "logs/"+pod.Name+"/agent.log"))
	if len(strings.TrimSpace(log)) == 0 {
		t.Errorf("logs/%s/agent.log is empty\n%s", pod.Name, g.Progress)
	}
	t.Logf("must-gather read %d bytes of %s's log; stderr:\n%s", len(log), pod.Name, g.Progress)
}
