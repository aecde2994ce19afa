package node

import (
	"fmt"
	"os"
	"path/filepath"
	"strings"
)

// hostMounts are the paths the kubelet, the runtime and the project's
// manifests know, each covered by a bind mount of a run-local directory
// inside the node's mount namespace: the host's own are never touched.
func hostMounts(rt runtimeRow) []string {
	mounts := append(append([]string(nil), rt.runDirs...), "/var/lib/kubelet", "/var/log/pods", "/var/log/containers")
	if rt.hidden != nil {
		mounts = append(mounts, rt.hidden()...)
	}
	return mounts
}

// shadowedSysctls are the kernel settings the kubelet writes at start
// (vm.overcommit_memory=1, kernel.panic=10, kernel.panic_on_oops=1): inside
// the namespace a plain file is bind-mounted over each, so the machine keeps
// its own values.
func shadowedSysctls() []string {
	return []string{"vm/overcommit_memory", "kernel/panic", "kernel/panic_on_oops"}
}

// SandboxImage names the pause image in containerd's sandbox_image and
// CRI-O's pause_image. The
// "localhost/" domain keeps the name as it is: the CRI plugin looks images up
// by their normalized reference, and a bare name would gain a registry's.
const SandboxImage = "localhost/nodeward-pause:test"

const containerdSocket = "/run/containerd/containerd.sock"

// cniBinDir is where Debian's containernetworking-plugins installs them.
const cniBinDir = "/usr/lib/cni"

// containerdConfig is containerd 1.6's configuration: its own root, state
// and socket; CRI with runc and the cgroupfs driver (SystemdCgroup=false,
// as the kubelet's cgroupDriver); restrict_oom_score_adj because root here
// lacks CAP_SYS_RESOURCE over its own oom_score_adj floor (without it every
// sandbox fails with "can't get final child's PID from pipe: EOF").
func containerdConfig(dir string) string {
	return fmt.Sprintf(`version = 2
root = %q
state = %q
[grpc]
  address = %q
[plugins."io.containerd.grpc.v1.cri"]
  sandbox_image = %q
  restrict_oom_score_adj = true
  enable_selinux = false
  [plugins."io.containerd.grpc.v1.cri".containerd]
    snapshotter = "overlayfs"
    default_runtime_name = "runc"
    [plugins."io.containerd.grpc.v1.cri".containerd.runtimes.runc]
      runtime_type = "io.containerd.runc.v2"
      [plugins."io.containerd.grpc.v1.cri".containerd.runtimes.runc.options]
        SystemdCgroup = false
  [plugins."io.containerd.grpc.v1.cri".cni]
    bin_dir = %q
    conf_dir = %q
`, filepath.Join(dir, "containerd", "root"), filepath.Join(dir, "containerd", "state"), containerdSocket,
		SandboxImage, cniBinDir, filepath.Join(dir, "cni"))
}

// cniConfig is a network of the loopback plugin alone: containerd reports
// the network ready, so the kubelet reports the node Ready, and no bridge,
// route or iptables rule is made on the host. A pod off the host network
// cannot start on it (containerd wants an address: "failed to find network
// info for sandbox"); the test's pods, like the agent, use the host's.
const cniConfig = `{
  "cniVersion": "1.0.0",
  "name": "nodeward-test",
  "plugins": [{"type": "loopback"}]
}
`

// kubeletConfig is the KubeletConfiguration for this machine: cgroup v1
// (failCgroupV1: false), the cgroupfs driver (containerd 1.6 has no
// RuntimeConfig call to tell the kubelet its driver; CRI-O is configured
// with it), pods under cgroupRoot, the runtime's CRI socket,
// swap allowed, eviction thresholds low enough that a busy test disk evicts
// nothing, and the kubelet's own ports on free ports: healthz on the
// loopback, the API port on every address, since the API server reaches a
// kubelet at its InternalIP (the host's) for a pod's log or exec (it
// takes only client certificates of the control plane's CA).
func kubeletConfig(cgroupRoot, socket, caFile string, port, healthzPort int) string {
	return fmt.Sprintf(`apiVersion: kubelet.config.k8s.io/v1beta1
kind: KubeletConfiguration
failCgroupV1: false
cgroupDriver: cgroupfs
cgroupRoot: %s
failSwapOn: false
containerRuntimeEndpoint: unix://%s
address: 0.0.0.0
port: %d
readOnlyPort: 0
healthzBindAddress: 127.0.0.1
healthzPort: %d
authentication:
  anonymous: {enabled: false}
  webhook: {enabled: false}
  x509: {clientCAFile: %s}
authorization: {mode: AlwaysAllow}
evictionHard: {memory.available: "1Mi", nodefs.available: "1%%", imagefs.available: "1%%", nodefs.inodesFree: "1%%"}
imageGCHighThresholdPercent: 100
imageGCLowThresholdPercent: 99
localStorageCapacityIsolation: false
serializeImagePulls: false
resolvConf: /etc/resolv.conf
nodeStatusUpdateFrequency: 5s
syncFrequency: 10s
fileCheckFrequency: 5s
`, cgroupRoot, socket, port, healthzPort, caFile)
}

// nodeKubeconfig authenticates the kubelet with the node's static token.
func nodeKubeconfig(server, caFile, token string) string {
	return fmt.Sprintf(`apiVersion: v1
kind: Config
clusters: [{name: test, cluster: {server: %q, certificate-authority: %q}}]
users: [{name: node, user: {token: %q}}]
contexts: [{name: test, context: {cluster: test, user: node}}]
current-context: test
`, server, caFile, token)
}

func runLocal(dir, hostPath string) string {
	return filepath.Join(dir, "mounts", strings.ReplaceAll(strings.TrimPrefix(hostPath, "/"), "/", "-"))
}

func shadowFile(dir, sysctl string) string {
	return filepath.Join(dir, "sysctl", strings.ReplaceAll(sysctl, "/", "-"))
}

// namespaceScript prepares the node's mount namespace and then execs the
// holder, whose life is the namespace's: every mount made here, or by
// containerd and the kubelet later, lives and dies in it. The namespace is
// made with private propagation (nothing leaks to the host), then / is made
// rshared inside it so that the kubelet's HostToContainer mounts work.
// mounts are hostMounts.
func namespaceScript(dir string, mounts []string, holder ...string) string {
	var b strings.Builder
	b.WriteString("set -eu\nmount --make-rshared /\n")
	for _, m := range mounts {
		fmt.Fprintf(&b, "mount --bind %q %q\n", runLocal(dir, m), m)
	}
	for _, s := range shadowedSysctls() {
		fmt.Fprintf(&b, "mount --bind %q %q\n", shadowFile(dir, s), "/proc/sys/"+s)
	}
	b.WriteString("exec")
	for _, arg := range holder {
		fmt.Fprintf(&b, " %q", arg)
	}
	b.WriteString("\n")
	return b.String()
}

// prepareDirs makes the run-local directories of mounts and the sysctl
// shadows of namespaceScript, and the host's mount points when missing; it
// returns the mount points it created, to remove at the end.
func prepareDirs(dir string, mounts []string) (created []string, err error) {
	for _, m := range mounts {
		if err := os.MkdirAll(runLocal(dir, m), 0o755); err != nil {
			return created, fmt.Errorf("create the node's %s: %w", m, err)
		}
		if _, err := os.Stat(m); os.IsNotExist(err) {
			if err := os.MkdirAll(m, 0o755); err != nil {
				return created, fmt.Errorf("create mount point %s: %w", m, err)
			}
			created = append(created, m)
		}
	}
	if err := os.MkdirAll(filepath.Join(dir, "sysctl"), 0o755); err != nil {
		return created, fmt.Errorf("create the sysctl shadows: %w", err)
	}
	for _, s := range shadowedSysctls() {
		value, err := os.ReadFile("/proc/sys/" + s)
		if err != nil {
			return created, fmt.Errorf("read %s: %w", s, err)
		}
		if err := os.WriteFile(shadowFile(dir, s), value, 0o644); err != nil {
			return created, fmt.Errorf("shadow %s: %w", s, err)
		}
	}
	return created, nil
}
