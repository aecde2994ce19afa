// Package node runs a real Kubernetes node for tests: containerd 1.6 (or
// CRI-O 1.34, Options.Runtime) with runc and a kubelet v1.36.3, registered
// with a test/cluster control plane, inside a private mount namespace so
// that the machine's own /run/containerd, /run/crio, /var/lib/kubelet,
// /var/log and kernel settings are left alone. One containerd node serves a
// whole test package (see Env); a CRI-O node lives for one test
// (Env.CRIONode). Everything it starts is killed and
// its cgroups removed at the end, also when the test binary dies (the
// holder, test/node/holder, reaps on its parent's death).
package node

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/nodeward/nodeward/test/cluster"
)

// Options tune a node.
type Options struct {
	// Name of the Node; it must be one of the control plane's RealNodes.
	Name string
	// Kubelet is the kubelet binary (test/tools builds it).
	Kubelet string
	// Tools holds the holder binary and the pause image (BuildTools).
	Tools *Tools
	// Runtime is the container runtime; Containerd when empty.
	Runtime Runtime
	// CRIO are CRI-O's binaries, needed when Runtime is CRIO.
	CRIO *CRIOBinaries
	// ControlPlane the kubelet registers with.
	ControlPlane *cluster.ControlPlane
	// Dir receives configuration, state and logs; a temporary directory
	// when empty.
	Dir string
	// Log receives progress lines; nil discards them.
	Log func(format string, args ...any)
}

// Node is a running real node.
type Node struct {
	opts       Options
	dir        string
	cgroupRoot string
	createdMPs []string // host mount points this node created

	rt       runtimeRow
	mu       sync.Mutex // guards runtime against Stop and RestartRuntime
	holder   *cluster.Process
	runtime  *cluster.Process
	kubelet  *cluster.Process
	stopOnce sync.Once
}

// Start prepares the namespace, starts the runtime (with the pause image
// imported) and the kubelet, and returns once the Node is Ready. On error
// everything started so far is stopped again.
func Start(ctx context.Context, opts Options) (_ *Node, err error) {
	if opts.Log == nil {
		opts.Log = func(string, ...any) {}
	}
	start := time.Now()
	dir := opts.Dir
	if dir == "" {
		if dir, err = os.MkdirTemp("", "nodeward-node-"); err != nil {
			return nil, fmt.Errorf("create the node's work dir: %w", err)
		}
	}
	rt, err := runtimeRowOf(opts.Runtime)
	if err != nil {
		return nil, err
	}
	if rt.name == CRIO && opts.CRIO == nil {
		return nil, fmt.Errorf("start node %s: a CRI-O node needs Options.CRIO (FindCRIO)", opts.Name)
	}
	n := &Node{opts: opts, dir: dir, rt: rt, cgroupRoot: fmt.Sprintf("/nodeward-node-%d-%s", os.Getpid(), opts.Name)}
	defer func() {
		if err != nil {
			n.Stop()
			err = fmt.Errorf("start node %s: %w (logs in %s)", opts.Name, err, dir)
		}
	}()
	if n.createdMPs, err = prepareDirs(dir, hostMounts(rt)); err != nil {
		return nil, err
	}
	if err := n.writeConfigs(); err != nil {
		return nil, err
	}
	if err := createCgroupRoot(n.cgroupRoot); err != nil {
		return nil, err
	}
	if err := n.startHolder(ctx); err != nil {
		return nil, err
	}
	if err := n.startRuntime(ctx); err != nil {
		return nil, err
	}
	if err := n.ImportImage(ctx, opts.Tools.PauseImage); err != nil {
		return nil, err
	}
	opts.Log("%s ready with the pause image in %s", rt.name, time.Since(start).Round(time.Millisecond))
	if err := n.startKubelet(ctx); err != nil {
		return nil, err
	}
	opts.Log("node %s Ready in %s (work dir %s)", opts.Name, time.Since(start).Round(time.Millisecond), dir)
	return n, nil
}

func (n *Node) path(elem ...string) string { return filepath.Join(append([]string{n.dir}, elem...)...) }

func (n *Node) writeConfigs() error {
	cp := n.opts.ControlPlane
	ports, err := cluster.FreePorts(2)
	if err != nil {
		return err
	}
	files := map[string]string{
		"cni/10-nodeward-test.conflist": cniConfig,
		"ca.crt":                        string(cp.CACertPEM()),
		"kubelet.yaml":                  kubeletConfig(n.cgroupRoot, n.rt.socket, n.path("ca.crt"), ports[0], ports[1]),
		"kubelet.kubeconfig":            nodeKubeconfig(cp.Config().Host, n.path("ca.crt"), cp.NodeToken(n.opts.Name)),
	}
	for name, content := range n.rt.configs(n) {
		files[name] = content
	}
	for name, content := range files {
		if err := os.MkdirAll(filepath.Dir(n.path(name)), 0o755); err != nil {
			return fmt.Errorf("write %s: %w", name, err)
		}
		mode := os.FileMode(0o600)
		if strings.HasSuffix(name, ".sh") { // a program the runtime runs
			mode = 0o700
		}
		if err := os.WriteFile(n.path(name), []byte(content), mode); err != nil {
			return fmt.Errorf("write %s: %w", name, err)
		}
	}
	if cp.NodeToken(n.opts.Name) == "" {
		return fmt.Errorf("the control plane has no token for node %s (cluster.Options.RealNodes)", n.opts.Name)
	}
	return nil
}

// startHolder makes the mount namespace: unshare (a new session, private
// propagation) runs namespaceScript, which execs the holder once the mounts
// are made. The namespace is ready when the holder runs.
func (n *Node) startHolder(ctx context.Context) error {
	hostNS, err := os.Readlink("/proc/self/ns/mnt")
	if err != nil {
		return fmt.Errorf("read the test's mount namespace: %w", err)
	}
	p, err := cluster.Launch("holder", "unshare", n.path("holder.log"), cluster.LaunchOptions{Append: true, Session: true}, "--mount", "--propagation", "private",
		"sh", "-c", namespaceScript(n.dir, hostMounts(n.rt), n.opts.Tools.Holder, "-cgroup-root", n.cgroupRoot, "-host-ns", hostNS))
	if err != nil {
		return err
	}
	n.holder = p
	return cluster.Poll(ctx, "the node's mount namespace", 20*time.Millisecond, []*cluster.Process{p}, func(context.Context) (bool, error) {
		exe, err := os.Readlink(fmt.Sprintf("/proc/%d/exe", p.Pid()))
		return err == nil && exe == n.opts.Tools.Holder, err
	})
}

// inNamespace is the command line that runs argv in the node's namespace.
func (n *Node) inNamespace(argv ...string) []string {
	return append([]string{"nsenter", fmt.Sprintf("--mount=/proc/%d/ns/mnt", n.holder.Pid()), "--"}, argv...)
}

func (n *Node) startKubelet(ctx context.Context) error {
	argv := n.inNamespace(n.opts.Kubelet,
		"--config="+n.path("kubelet.yaml"),
		"--kubeconfig="+n.path("kubelet.kubeconfig"),
		"--hostname-override="+n.opts.Name,
		"--cert-dir="+n.path("kubelet-pki"),
		"--v=1",
	)
	p, err := cluster.Launch("kubelet", argv[0], n.path("kubelet.log"), cluster.LaunchOptions{Append: true}, argv[1:]...)
	if err != nil {
		return err
	}
	n.kubelet = p
	client := n.opts.ControlPlane.Client()
	return cluster.Poll(ctx, "node "+n.opts.Name+" Ready", 200*time.Millisecond, []*cluster.Process{n.holder, n.runtime, p}, func(ctx context.Context) (bool, error) {
		node, err := client.CoreV1().Nodes().Get(ctx, n.opts.Name, metav1.GetOptions{})
		if err != nil {
			return false, err
		}
		for _, c := range node.Status.Conditions {
			if c.Type == corev1.NodeReady {
				return c.Status == corev1.ConditionTrue, fmt.Errorf("condition Ready=%s: %s", c.Status, c.Message)
			}
		}
		return false, nil
	})
}

// Launch starts argv in the node's mount namespace, as a program of the
// host (a host-mode agent) would run, its output in the node's dir under
// name.log. Stop it when done; the node's Stop kills it otherwise.
func (n *Node) Launch(name string, argv ...string) (*cluster.Process, error) {
	argv = n.inNamespace(argv...)
	return cluster.Launch(name, argv[0], n.path(name+".log"), cluster.LaunchOptions{Append: true}, argv[1:]...)
}

// HostPath is path as the node's processes see it (through the holder's
// root), for files the kubelet mounted inside the namespace such as a pod's
// projected service account token.
func (n *Node) HostPath(path string) string {
	return filepath.Join(fmt.Sprintf("/proc/%d/root", n.holder.Pid()), path)
}

// KubepodsCgroup is the memory cgroup the kubelet puts the node's pods in,
// as the host sees it: <cgroupRoot>/kubepods in the memory hierarchy on
// cgroup v1, in the unified one on v2 (the cgroupfs driver).
func (n *Node) KubepodsCgroup() string {
	if _, err := os.Stat("/sys/fs/cgroup/cgroup.controllers"); err == nil {
		return filepath.Join("/sys/fs/cgroup", n.cgroupRoot, "kubepods")
	}
	return filepath.Join("/sys/fs/cgroup/memory", n.cgroupRoot, "kubepods")
}

// Name is the Node's name.
func (n *Node) Name() string { return n.opts.Name }

// Dir holds the node's configuration, state and logs.
func (n *Node) Dir() string { return n.dir }

// Stop stops the kubelet (SIGTERM, then SIGKILL), then has the holder kill
// everything else of the node and remove its cgroups, and removes the mount
// points it created on the host. The work dir stays (Env removes it).
func (n *Node) Stop() {
	n.stopOnce.Do(func() {
		n.mu.Lock()
		defer n.mu.Unlock()
		if n.kubelet != nil {
			n.kubelet.Stop(15 * time.Second)
		}
		if n.holder != nil {
			n.holder.Stop(30 * time.Second)
		}
		for _, p := range []*cluster.Process{n.runtime, n.kubelet} {
			if p != nil {
				p.Stop(5 * time.Second)
			}
		}
		removeCgroupRoot(n.cgroupRoot)
		for _, mp := range n.createdMPs {
			_ = os.Remove(mp)
		}
	})
}
