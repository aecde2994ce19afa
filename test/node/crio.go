package node

import (
	"archive/tar"
	"context"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials/insecure"
	runtimeapi "k8s.io/cri-api/pkg/apis/runtime/v1"

	"github.com/nodeward/nodeward/test/cluster"
)

// crioSocket is CRI-O's default socket, where the agent's runtime probe
// looks for it (conditions.RuntimeEndpointCandidates).
const crioSocket = "/run/crio/crio.sock"

// conmonPath is Debian's conmon, which runs CRI-O's containers with runc
// (Debian's crun is too old for CRI-O's OCI spec version).
const conmonPath = "/usr/bin/conmon"

// crioSource is the wrapper module test/tools/install.sh builds CRI-O from,
// relative to the repository root.
const crioSource = "test/node/crio"

// CRIOBinaries are the programs test/tools builds for a CRI-O node.
type CRIOBinaries struct {
	// Crio is the daemon.
	Crio string
	// Pinns makes the pods' namespaces for it.
	Pinns string
}

// FindCRIO finds crio and pinns where `make testbin` built them for the
// wrapper module of the repository at root, under the testbin cache.
func FindCRIO(root string) (*CRIOBinaries, error) {
	key, err := crioKey(filepath.Join(root, crioSource))
	if err != nil {
		return nil, err
	}
	binDir, err := cluster.BinDir()
	if err != nil {
		return nil, err
	}
	dir := filepath.Join(binDir, "crio", key)
	b := &CRIOBinaries{Crio: filepath.Join(dir, "crio"), Pinns: filepath.Join(dir, "pinns")}
	for _, p := range []string{b.Crio, b.Pinns} {
		if _, err := os.Stat(p); err != nil {
			return nil, fmt.Errorf("%w (run `make testbin`: it builds CRI-O for this source)", err)
		}
	}
	return b, nil
}

// crioKey is the cache key test/tools/install.sh builds CRI-O under: the
// cri-o version from the wrapper's go.mod, a dash, and the first 12 hex
// digits of the SHA-256 of its go.mod, go.sum and tags concatenated.
func crioKey(src string) (string, error) {
	h := sha256.New()
	var version string
	for _, name := range []string{"go.mod", "go.sum", "tags"} {
		data, err := os.ReadFile(filepath.Join(src, name))
		if err != nil {
			return "", fmt.Errorf("read CRI-O's wrapper module: %w", err)
		}
		h.Write(data)
		for line := range strings.Lines(string(data)) {
			if f := strings.Fields(line); name == "go.mod" && len(f) >= 2 && f[0] == "github.com/cri-o/cri-o" {
				version = f[1]
			}
		}
	}
	if version == "" {
		return "", fmt.Errorf("%s/go.mod requires no github.com/cri-o/cri-o", src)
	}
	return version + "-" + hex.EncodeToString(h.Sum(nil))[:12], nil
}

// crioHiddenDirs hide the kernel's huge page sizes from the node when the
// hugetlb controller is compiled in but not mounted (cgroup v1 here): the
// kubelet asks for a limit of 0 for every size in /sys/kernel/mm/hugepages,
// CRI-O passes them on because /proc/cgroups lists the controller, and runc
// fails every container ("cannot set hugetlb limit: container could not
// join or create cgroup"). containerd drops the limits itself
// (disable_hugetlb_controller, true by default). On cgroup v2, or with the
// hierarchy mounted, nothing is hidden.
func crioHiddenDirs() []string {
	_, v2 := os.Stat("/sys/fs/cgroup/cgroup.controllers")
	_, mounted := os.Stat("/sys/fs/cgroup/hugetlb")
	if v2 == nil || mounted == nil {
		return nil
	}
	return []string{"/sys/kernel/mm/hugepages"}
}

// crioConfigs are CRI-O's configuration and the files it points at.
func crioConfigs(n *Node) map[string]string {
	return map[string]string{
		"crio.conf":            crioConfig(n.dir, n.opts.CRIO.Pinns),
		"crio/policy.json":     `{"default": [{"type": "insecureAcceptAnything"}]}` + "\n",
		"crio/storage.conf":    crioStorageConfig(n.dir),
		"crio/registries.conf": "unqualified-search-registries = []\n",
		"crio/hooks/.keep":     "",
		crioRuncWrapper:        fmt.Sprintf(runcRestrictOOM, lookPath("runc")),
	}
}

// crioRuncWrapper is the runtime CRI-O runs: runc behind runcRestrictOOM.
const crioRuncWrapper = "crio/runc-restrict-oom.sh"

// runcRestrictOOM does for CRI-O what containerd's restrict_oom_score_adj
// does (config.go): root here lacks CAP_SYS_RESOURCE, so runc may not set a
// container's oom_score_adj below its own, and every pod the kubelet scores
// below it (system-node-critical ones such as the agent: -997) failed
// "failed to update /proc/self/oom_score_adj: Permission denied". It raises
// the bundle's oomScoreAdj to the caller's before running runc (%s). CRI-O
// has no such setting.
const runcRestrictOOM = `#!/bin/sh
bundle= prev=
for a in "$@"; do
	if [ "$prev" = --bundle ] || [ "$prev" = -b ]; then bundle=$a; fi
	prev=$a
done
if [ -n "$bundle" ] && [ -f "$bundle/config.json" ]; then
	floor=$(cat /proc/self/oom_score_adj)
	jq --argjson floor "$floor" 'if (.process.oomScoreAdj // $floor) < $floor then .process.oomScoreAdj = $floor else . end' \
		"$bundle/config.json" >"$bundle/config.json.oom" && mv "$bundle/config.json.oom" "$bundle/config.json"
fi
exec %[1]q "$@"
`

func crioDir(dir string, elem ...string) string {
	return filepath.Join(append([]string{dir, "crio"}, elem...)...)
}

// crioStorageConfig keeps CRI-O and skopeo off the machine's
// /etc/containers/storage.conf and /var/lib/containers: vfs (no overlay
// mounts, which would need the namespace to be visible to skopeo) under the
// node's dir.
func crioStorageConfig(dir string) string {
	return fmt.Sprintf("[storage]\ndriver = \"vfs\"\ngraphroot = %q\nrunroot = %q\n", crioDir(dir, "root"), crioDir(dir, "runroot"))
}

// crioConfig is CRI-O's configuration with every path under the node's dir
// (or, for the socket, under its private /run/crio): the cgroupfs manager
// (PID 1 is not systemd here, and the kubelet uses cgroupfs), runc under
// Debian's conmon, the pause image side-loaded (a sandbox looks it up even
// without an infra container), the loopback network, no journald, metrics,
// NRI or irqbalance file.
func crioConfig(dir, pinns string) string {
	d := func(elem ...string) string { return crioDir(dir, elem...) }
	return fmt.Sprintf(`[crio]
root = %q
runroot = %q
storage_driver = "vfs"
log_dir = %q
version_file = %q
version_file_persist = %q
clean_shutdown_file = %q
[crio.api]
listen = %q
stream_address = "127.0.0.1"
stream_port = "0"
[crio.runtime]
default_runtime = "runc"
cgroup_manager = "cgroupfs"
selinux = false
log_to_journald = false
pinns_path = %q
namespaces_dir = %q
container_exits_dir = %q
container_attach_socket_dir = %q
hooks_dir = [%q]
cdi_spec_dirs = [%q]
decryption_keys_path = %q
irqbalance_config_file = %q
irqbalance_config_restore_file = "disable"
[crio.runtime.runtimes.runc]
runtime_path = %q
runtime_type = "oci"
runtime_root = %q
monitor_path = %q
monitor_cgroup = "pod"
[crio.image]
pause_image = %q
pause_command = "/pause"
signature_policy = %q
signature_policy_dir = %q
[crio.network]
network_dir = %q
plugin_dirs = [%q]
[crio.metrics]
enable_metrics = false
[crio.nri]
enable_nri = false
`, d("root"), d("runroot"), d("log"), d("version"), d("version-persist"), d("clean.shutdown"),
		crioSocket, pinns, d("ns"), d("exits"), d("attach"), d("hooks"), d("cdi"), d("keys"), d("irqbalance"),
		filepath.Join(dir, crioRuncWrapper), d("runc"), conmonPath,
		SandboxImage, d("policy.json"), d("policies"), filepath.Join(dir, "cni"), cniBinDir)
}

// lookPath is name's path on PATH, or name when it is not there (the
// runtime then fails with the reason in its log).
func lookPath(name string) string {
	if p, err := exec.LookPath(name); err == nil {
		return p
	}
	return name
}

// crioEnv points containers/storage and containers/image, in CRI-O and in
// skopeo, at the node's files instead of the machine's /etc/containers.
func crioEnv(dir string) []string {
	return []string{"CONTAINERS_STORAGE_CONF=" + crioDir(dir, "storage.conf"),
		"CONTAINERS_REGISTRIES_CONF=" + crioDir(dir, "registries.conf")}
}

// crioArgv runs CRI-O with the node's configuration only: the empty
// --config-dir keeps /etc/crio/crio.conf.d out.
func crioArgv(n *Node) []string {
	argv := append([]string{"env"}, crioEnv(n.dir)...)
	return append(argv, n.opts.CRIO.Crio, "--config", n.path("crio.conf"), "--config-dir", "")
}

// crioAnswers asks CRI-O's CRI service for its version and status: it
// answers once RuntimeReady and NetworkReady are both true.
func crioAnswers(ctx context.Context, n *Node) error {
	if _, err := os.Stat(n.RuntimeSocket()); err != nil {
		return err
	}
	conn, err := grpc.NewClient("unix://"+n.RuntimeSocket(), grpc.WithTransportCredentials(insecure.NewCredentials()))
	if err != nil {
		return fmt.Errorf("dial CRI-O: %w", err)
	}
	defer conn.Close()
	ctx, cancel := context.WithTimeout(ctx, 2*time.Second)
	defer cancel()
	client := runtimeapi.NewRuntimeServiceClient(conn)
	if _, err := client.Version(ctx, &runtimeapi.VersionRequest{}); err != nil {
		return fmt.Errorf("CRI Version: %w", err)
	}
	status, err := client.Status(ctx, &runtimeapi.StatusRequest{})
	if err != nil {
		return fmt.Errorf("CRI Status: %w", err)
	}
	for _, c := range status.GetStatus().GetConditions() {
		if !c.Status {
			return fmt.Errorf("CRI Status: %s false: %s", c.Type, c.Message)
		}
	}
	return nil
}

// crioImport copies the tarball into CRI-O's storage with skopeo (CRI-O
// cannot import), named as the tarball's ref.name says; CRI-O sees it at
// its next image lookup.
func crioImport(ctx context.Context, n *Node, tarball string) error {
	name, err := imageRefName(tarball)
	if err != nil {
		return err
	}
	dest := fmt.Sprintf("containers-storage:[vfs@%s+%s]%s", crioDir(n.dir, "root"), crioDir(n.dir, "runroot"), name)
	cmd := exec.CommandContext(ctx, "skopeo", "--policy", crioDir(n.dir, "policy.json"), "copy", "--quiet", "oci-archive:"+tarball, dest)
	cmd.Env = append(os.Environ(), crioEnv(n.dir)...)
	if out, err := cmd.CombinedOutput(); err != nil {
		return fmt.Errorf("copy %s into CRI-O's storage: %w: %s", tarball, err, out)
	}
	return nil
}

// imageRefName reads the org.opencontainers.image.ref.name of the one image
// in an OCI image-layout tarball's index.json.
func imageRefName(tarball string) (string, error) {
	f, err := os.Open(tarball)
	if err != nil {
		return "", fmt.Errorf("read the image's name: %w", err)
	}
	defer f.Close()
	tr := tar.NewReader(f)
	for {
		hdr, err := tr.Next()
		if errors.Is(err, io.EOF) {
			return "", fmt.Errorf("%s has no index.json", tarball)
		}
		if err != nil {
			return "", fmt.Errorf("read %s: %w", tarball, err)
		}
		if filepath.Clean(hdr.Name) != "index.json" {
			continue
		}
		var index struct {
			Manifests []struct {
				Annotations map[string]string `json:"annotations"`
			} `json:"manifests"`
		}
		if err := json.NewDecoder(tr).Decode(&index); err != nil {
			return "", fmt.Errorf("decode %s's index.json: %w", tarball, err)
		}
		if len(index.Manifests) != 1 || index.Manifests[0].Annotations["org.opencontainers.image.ref.name"] == "" {
			return "", fmt.Errorf("%s's index.json names no single image", tarball)
		}
		return index.Manifests[0].Annotations["org.opencontainers.image.ref.name"], nil
	}
}
