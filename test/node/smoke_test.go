package node_test

import (
	"context"
	"testing"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
)

// TestNodeRegistered: the kubelet registered its Node with the static
// node identity and reports the containerd runtime.
func TestNodeRegistered(t *testing.T) {
	cp, n := env.Node(t)
	node, err := cp.Client().CoreV1().Nodes().Get(context.Background(), n.Name(), metav1.GetOptions{})
	if err != nil {
		t.Fatalf("get node: %v", err)
	}
	if v := node.Status.NodeInfo.KubeletVersion; v != "v1.36.3" {
		t.Errorf("kubelet version %q", v)
	}
	t.Logf("node %s: runtime %s, kubelet %s", n.Name(), node.Status.NodeInfo.ContainerRuntimeVersion, node.Status.NodeInfo.KubeletVersion)
}
