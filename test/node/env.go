package node

import (
	"context"
	"flag"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"testing"
	"time"

	"github.com/nodeward/nodeward/test/cluster"
	"github.com/nodeward/nodeward/test/testenv"
)

// NodeName is the Env's real node.
const NodeName = "real-node-0"

// CRIONodeName is the Env's CRI-O node (Env.CRIONode).
const CRIONodeName = "real-crio-0"

// Env shares one control plane and one real node among the tests of a
// package, as cluster.Env shares a control plane:
//
//	var env node.Env
//	func TestMain(m *testing.M) { os.Exit(env.Run(m)) }
//	func TestX(t *testing.T) { cp, n := env.Node(t); ... }
//
// Outside CI it skips (with the reason) when not root or when containerd,
// runc, ctr, nsenter, unshare or the kubelet are missing; in CI that fails.
// A test that wants a CRI-O node calls CRIONode instead of Node, which skips
// (fails in CI) likewise without conmon, skopeo or `make testbin`'s CRI-O.
type Env struct {
	cp      *cluster.ControlPlane
	node    *Node
	tools   *Tools
	kubelet string
	root    string // the repository
	dir     string // work dir: tools, images
	reason  string // why there is no node
}

// Run starts the control plane and the node (unless -short), runs the
// tests and stops both. Logs are kept when a test failed; the nodeward
// binaries the tests built (cluster.NodewardBinary) are removed in any case.
func (e *Env) Run(m *testing.M) int {
	defer cluster.RemoveBuilds()
	flag.Parse()
	if testing.Short() {
		e.reason = "real node not started in -short mode"
		return m.Run()
	}
	err := e.start()
	if err != nil && testenv.InCI() {
		fmt.Fprintln(os.Stderr, "node: cannot start the real node:", err)
		e.stop(true)
		return 1
	}
	if err != nil {
		e.reason = "real node unavailable: " + err.Error()
	}
	code := m.Run()
	e.stop(code != 0 || err != nil)
	return code
}

func (e *Env) start() (err error) {
	if os.Geteuid() != 0 {
		return fmt.Errorf("needs root")
	}
	for _, bin := range []string{"containerd", "containerd-shim-runc-v2", "runc", "ctr", "nsenter", "unshare"} {
		if _, err := exec.LookPath(bin); err != nil {
			return fmt.Errorf("%s not on PATH (apt-get install containerd runc util-linux)", bin)
		}
	}
	if _, err := os.Stat(filepath.Join(cniBinDir, "loopback")); err != nil {
		return fmt.Errorf("CNI plugins: %w (apt-get install containernetworking-plugins)", err)
	}
	binDir, err := cluster.BinDir()
	if err != nil {
		return err
	}
	e.kubelet = filepath.Join(binDir, "kubelet")
	if _, err := os.Stat(e.kubelet); err != nil {
		return fmt.Errorf("kubelet: %w (run `make testbin`)", err)
	}
	if e.root, err = cluster.RepoRoot(); err != nil {
		return err
	}
	if e.dir, err = os.MkdirTemp("", "nodeward-realnode-"); err != nil {
		return fmt.Errorf("create work dir: %w", err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Minute)
	defer cancel()
	if e.tools, err = BuildTools(ctx, e.root, e.dir); err != nil {
		return err
	}
	if e.cp, err = cluster.Start(ctx, cluster.Options{BinDir: binDir, Log: e.logf, RealNodes: []string{NodeName, CRIONodeName}}); err != nil {
		return err
	}
	e.node, err = Start(ctx, Options{
		Name: NodeName, Kubelet: e.kubelet, Tools: e.tools, ControlPlane: e.cp,
		Dir: filepath.Join(e.dir, "node"), Log: e.logf,
	})
	return err
}

// logf prints progress in verbose runs.
func (e *Env) logf(format string, args ...any) {
	if testing.Verbose() {
		fmt.Fprintf(os.Stderr, "node: "+format+"\n", args...)
	}
}

func (e *Env) stop(keepLogs bool) {
	if e.node != nil {
		e.node.Stop()
	}
	if e.cp != nil {
		e.cp.Stop()
	}
	if keepLogs {
		if e.dir != "" {
			fmt.Fprintf(os.Stderr, "node: node logs kept in %s\n", filepath.Join(e.dir, "node"))
		}
		if e.cp != nil {
			fmt.Fprintf(os.Stderr, "node: control-plane logs kept in %s\n", e.cp.Dir())
		}
		return
	}
	if e.cp != nil {
		os.RemoveAll(e.cp.Dir())
	}
	if e.dir != "" {
		os.RemoveAll(e.dir)
	}
}

// Node returns the shared control plane and node, or skips the test (fails
// it in CI) when there are none.
func (e *Env) Node(t testing.TB) (*cluster.ControlPlane, *Node) {
	t.Helper()
	testenv.Require(t, e.node != nil, e.reason)
	return e.cp, e.node
}

// Root is the repository's root directory.
func (e *Env) Root() string { return e.root }

// Dir is a work directory that lives as long as the Env.
func (e *Env) Dir() string { return e.dir }
