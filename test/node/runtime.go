package node

import (
	"context"
	"fmt"
	"os/exec"
	"path/filepath"
	"time"

	"github.com/nodeward/nodeward/test/cluster"
)

// Runtime names a node's container runtime.
type Runtime string

const (
	// Containerd is containerd 1.6 from Debian with runc: the default.
	Containerd Runtime = "containerd"
	// CRIO is CRI-O as test/tools builds it (CRIOBinaries), with Debian's
	// conmon and runc: the runtime of RHCOS and Fedora CoreOS.
	CRIO Runtime = "crio"
)

// runtimeRow is what the node needs to know of one runtime: where its
// socket lives, its files, its command line, how to tell that it answers and
// how to side-load an image (no registry is reachable from the tests).
type runtimeRow struct {
	name Runtime
	// runDirs are the runtime's directories under /run, each covered by a
	// private one in the node's namespace; the first holds the socket.
	runDirs []string
	// hidden are host directories the node's namespace covers with an
	// empty one, for what the runtime would misread; nil for none.
	hidden func() []string
	// socket is the CRI socket as the node's processes see it.
	socket string
	// configs are files to write under the node's dir, by relative path.
	configs func(n *Node) map[string]string
	// argv is the runtime's command line.
	argv func(n *Node) []string
	// answers returns nil once the runtime answers on its socket.
	answers func(ctx context.Context, n *Node) error
	// importImage side-loads an OCI image-layout tarball under its
	// ref.name, where the runtime's CRI service finds it.
	importImage func(ctx context.Context, n *Node, tarball string) error
}

// runtimeRows are the runtimes a node can run.
func runtimeRows() []runtimeRow {
	return []runtimeRow{
		{
			name: Containerd, runDirs: []string{"/run/containerd"}, socket: containerdSocket,
			configs: func(n *Node) map[string]string {
				return map[string]string{"containerd.toml": containerdConfig(n.dir)}
			},
			argv:        func(n *Node) []string { return []string{"containerd", "--config", n.path("containerd.toml")} },
			answers:     containerdAnswers,
			importImage: containerdImport,
		},
		{
			// /run/containerd too, empty: a CRI-O node has no containerd,
			// and the runtime probe must not find the host's.
			name: CRIO, runDirs: []string{"/run/crio", "/run/containerd"}, socket: crioSocket,
			hidden:      crioHiddenDirs,
			configs:     crioConfigs,
			argv:        crioArgv,
			answers:     crioAnswers,
			importImage: crioImport,
		},
	}
}

func runtimeRowOf(name Runtime) (runtimeRow, error) {
	if name == "" {
		name = Containerd
	}
	for _, r := range runtimeRows() {
		if r.name == name {
			return r, nil
		}
	}
	return runtimeRow{}, fmt.Errorf("unknown container runtime %q (%s or %s)", name, Containerd, CRIO)
}

// startRuntime starts the runtime in the node's namespace and waits until
// it answers on its socket.
func (n *Node) startRuntime(ctx context.Context) error {
	argv := n.inNamespace(n.rt.argv(n)...)
	name := string(n.rt.name)
	p, err := cluster.Launch(name, argv[0], n.path(name+".log"), cluster.LaunchOptions{Append: true}, argv[1:]...)
	if err != nil {
		return err
	}
	n.runtime = p
	return cluster.Poll(ctx, name+"'s socket", 100*time.Millisecond, []*cluster.Process{n.holder, p}, func(ctx context.Context) (bool, error) {
		err := n.rt.answers(ctx, n)
		return err == nil, err
	})
}

// Runtime is the node's container runtime.
func (n *Node) Runtime() Runtime { return n.rt.name }

// RuntimeSocket is the runtime's CRI socket as the host sees it.
func (n *Node) RuntimeSocket() string {
	return filepath.Join(runLocal(n.dir, filepath.Dir(n.rt.socket)), filepath.Base(n.rt.socket))
}

// ContainerdSocket is containerd's socket as the host sees it (the node's
// /run/containerd/containerd.sock).
func (n *Node) ContainerdSocket() string {
	return filepath.Join(runLocal(n.dir, "/run/containerd"), "containerd.sock")
}

// ImportImage side-loads an OCI image-layout tarball into the node's
// runtime under the tarball's ref.name.
func (n *Node) ImportImage(ctx context.Context, tarball string) error {
	return n.rt.importImage(ctx, n, tarball)
}

// RestartRuntime stops the runtime (SIGTERM: its shims or conmons and
// containers go on) and starts it again, as a runtime upgrade would; it
// returns once the new one answers.
func (n *Node) RestartRuntime(ctx context.Context) error {
	n.StopRuntime()
	return n.StartRuntime(ctx)
}

// StopRuntime stops the node's runtime (its pods keep running, as on a
// real node).
func (n *Node) StopRuntime() {
	n.mu.Lock()
	defer n.mu.Unlock()
	n.runtime.Stop(15 * time.Second)
}

// StartRuntime starts the runtime again on the same root, state and
// socket, and waits until it answers.
func (n *Node) StartRuntime(ctx context.Context) error {
	n.mu.Lock()
	defer n.mu.Unlock()
	return n.startRuntime(ctx)
}

func containerdAnswers(ctx context.Context, n *Node) error {
	out, err := exec.CommandContext(ctx, "ctr", "--address", n.ContainerdSocket(), "version").CombinedOutput()
	if err != nil {
		return fmt.Errorf("%w: %s", err, out)
	}
	return nil
}

// containerdImport imports into containerd's k8s.io namespace, where the
// CRI plugin sees it.
func containerdImport(ctx context.Context, n *Node, tarball string) error {
	out, err := exec.CommandContext(ctx, "ctr", "--address", n.ContainerdSocket(), "-n", "k8s.io",
		"images", "import", "--snapshotter", "overlayfs", tarball).CombinedOutput()
	if err != nil {
		return fmt.Errorf("import %s into containerd: %w: %s", tarball, err, out)
	}
	return nil
}
