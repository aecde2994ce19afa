package node

import (
	"context"
	"fmt"
	"os"
	"os/exec"
	"testing"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/nodeward/nodeward/test/cluster"
	"github.com/nodeward/nodeward/test/testenv"
)

// CRIONode starts a CRI-O node, CRIONodeName, on the Env's control plane
// for the calling test, and stops it and deletes its Node when the test
// ends: a second Ready node for the whole package would also run the
// DaemonSet pods the containerd node's tests count on. It skips (fails in
// CI) without the control plane, conmon, skopeo or `make testbin`'s CRI-O.
func (e *Env) CRIONode(t testing.TB) (*cluster.ControlPlane, *Node) {
	t.Helper()
	testenv.Require(t, e.cp != nil && e.tools != nil, e.reason)
	binaries, err := e.crioPrerequisites()
	testenv.Require(t, err == nil, fmt.Sprintf("no CRI-O node: %v", err))
	dir, err := os.MkdirTemp(e.dir, "crio-node-")
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
	defer cancel()
	n, err := Start(ctx, Options{
		Name: CRIONodeName, Kubelet: e.kubelet, Tools: e.tools, ControlPlane: e.cp,
		Runtime: CRIO, CRIO: binaries, Dir: dir, Log: e.logf,
	})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { e.removeCRIONode(t, n) })
	return e.cp, n
}

// crioPrerequisites finds what a CRI-O node runs beyond a containerd
// node's kubelet, nsenter and unshare.
func (e *Env) crioPrerequisites() (*CRIOBinaries, error) {
	if _, err := os.Stat(conmonPath); err != nil {
		return nil, fmt.Errorf("conmon: %w (apt-get install conmon)", err)
	}
	for _, bin := range []string{"runc", "skopeo", "jq"} {
		if _, err := exec.LookPath(bin); err != nil {
			return nil, fmt.Errorf("%s not on PATH (apt-get install runc skopeo jq)", bin)
		}
	}
	return FindCRIO(e.root)
}

// removeCRIONode stops the node and deletes its Node (its pods then go
// with the control plane's pod garbage collector); the node's files stay
// when the test failed.
func (e *Env) removeCRIONode(t testing.TB, n *Node) {
	n.Stop()
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	if err := e.cp.Client().CoreV1().Nodes().Delete(ctx, n.Name(), metav1.DeleteOptions{}); err != nil {
		t.Errorf("delete node %s: %v", n.Name(), err)
	}
	if t.Failed() {
		t.Logf("CRI-O node logs kept in %s", n.Dir())
		return
	}
	os.RemoveAll(n.Dir())
}
