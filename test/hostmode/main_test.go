package hostmode_test

import (
	"context"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/nodeward/nodeward/test/cluster"
	"github.com/nodeward/nodeward/test/hostmode"
	"github.com/nodeward/nodeward/test/rpmostree"
	"github.com/nodeward/nodeward/test/testenv"
)

var env cluster.Env

// buildDir holds the package's rpm-ostree double; removed after the run
// (nodeward itself is cluster.NodewardBinary's, which env.Run removes).
var buildDir string

func TestMain(m *testing.M) {
	if root := os.Getenv(childRootVariable); root != "" {
		os.Exit(runChild(root))
	}
	code := env.Run(m)
	if buildDir != "" {
		os.RemoveAll(buildDir)
	}
	os.Exit(code)
}

// repoRoot is the module root, from the package directory.
const repoRoot = "../.."

func logf(format string, args ...any) {
	if testing.Verbose() {
		fmt.Fprintf(os.Stderr, "hostmode: "+format+"\n", args...)
	}
}

// requireHost skips (fails in CI) without what the containers need.
func requireHost(t *testing.T) {
	t.Helper()
	testenv.RequireRoot(t)
	for _, bin := range []string{"systemd-nspawn", "nsenter", "tar", "zstd"} {
		testenv.RequireBinary(t, bin)
	}
	if _, cached, err := hostmode.RootfsCached(); err != nil || !cached {
		testenv.RequireBinary(t, "mmdebstrap") // to build the container root
	}
	testenv.Require(t, fileExists("/sys/fs/cgroup/systemd/cgroup.procs") || fileExists("/sys/fs/cgroup/cgroup.controllers"),
		"no cgroup hierarchy for systemd-nspawn under /sys/fs/cgroup")
}

type binaries struct {
	nodeward, rpmOstree string
}

// build finds nodeward as `make build` builds it (cluster.NodewardBinary)
// and builds the rpm-ostree double, once per package run.
var build = sync.OnceValues(func() (binaries, error) {
	nodeward, err := cluster.NodewardBinary(cluster.ReleaseBuild)
	if err != nil {
		return binaries{}, err
	}
	dir, err := os.MkdirTemp("", "nodeward-hostmode-bin-")
	if err != nil {
		return binaries{}, err
	}
	buildDir = dir
	b := binaries{nodeward: nodeward}
	if b.rpmOstree, err = rpmostree.Build(dir); err != nil {
		return b, err
	}
	return b, nil
})

// checkBinary runs the built binary in a container root (chroot), once per
// run: a binary linked against a newer C library than the root's would not
// start there. The static build (no cgo) replaces it then, in b and for
// every later host.
func checkBinary(b binaries, root string) (binaries, error) {
	rootBinary.once.Do(func() { rootBinary.nodeward, rootBinary.err = nodewardForRoot(b.nodeward, root) })
	b.nodeward = rootBinary.nodeward
	return b, rootBinary.err
}

// rootBinary is the nodeward binary that starts in the container roots,
// as checkBinary found it.
var rootBinary struct {
	once     sync.Once
	nodeward string
	err      error
}

// nodewardForRoot is nodeward when it starts in root, else the static build.
func nodewardForRoot(nodeward, root string) (string, error) {
	bin := filepath.Join(root, "tmp", "nodeward-check")
	data, err := os.ReadFile(nodeward)
	if err != nil {
		return "", fmt.Errorf("check nodeward in the container root: %w", err)
	}
	if err := os.WriteFile(bin, data, 0o755); err != nil {
		return "", fmt.Errorf("check nodeward in the container root: %w", err)
	}
	defer os.Remove(bin)
	out, err := exec.Command("chroot", root, "/tmp/nodeward-check", "version").CombinedOutput()
	if err == nil {
		return nodeward, nil
	}
	logf("the nodeward binary does not run in the %s root (%v: %s): using the build without cgo",
		hostmode.RootfsSuite, err, strings.TrimSpace(string(out)))
	return cluster.NodewardBinary(cluster.StaticBuild)
}

// rootfs is the cached container root, built at most once per run.
var rootfs = sync.OnceValues(func() (string, error) {
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Minute)
	defer cancel()
	return hostmode.Rootfs(ctx, logf)
})

func fileExists(path string) bool {
	_, err := os.Stat(path)
	return err == nil
}
