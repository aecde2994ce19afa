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

// buildDir holds the package's binaries; removed after the run.
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

// build builds nodeward as `make build` does and the rpm-ostree double,
// once per package run.
var build = sync.OnceValues(func() (binaries, error) {
	dir, err := os.MkdirTemp("", "nodeward-hostmode-bin-")
	if err != nil {
		return binaries{}, err
	}
	buildDir = dir
	b := binaries{nodeward: filepath.Join(dir, "nodeward")}
	if err := goBuild(b.nodeward, nil); err != nil {
		return b, err
	}
	if b.rpmOstree, err = rpmostree.Build(dir); err != nil {
		return b, err
	}
	return b, nil
})

func goBuild(out string, env []string) error {
	cmd := exec.Command("go", "build", "-tags", "grpcnotrace", "-ldflags", "-X main.version=hostmode-test", "-o", out, "./cmd/nodeward")
	cmd.Dir = repoRoot
	cmd.Env = append(os.Environ(), env...)
	if output, err := cmd.CombinedOutput(); err != nil {
		return fmt.Errorf("build nodeward: %w: %s", err, output)
	}
	return nil
}

// checkBinary runs the built binary in a container root (chroot), once per
// run: a binary linked against a newer C library than the root's would not
// start there. It is then built again without cgo.
func checkBinary(b binaries, root string) error {
	binaryChecked.Do(func() {
		bin := filepath.Join(root, "tmp", "nodeward-check")
		data, err := os.ReadFile(b.nodeward)
		if err != nil {
			binaryCheckErr = err
			return
		}
		if err := os.WriteFile(bin, data, 0o755); err != nil {
			binaryCheckErr = err
			return
		}
		defer os.Remove(bin)
		out, err := exec.Command("chroot", root, "/tmp/nodeward-check", "version").CombinedOutput()
		if err == nil {
			return
		}
		logf("the nodeward binary does not run in the %s root (%v: %s): building it with CGO_ENABLED=0",
			hostmode.RootfsSuite, err, strings.TrimSpace(string(out)))
		binaryCheckErr = goBuild(b.nodeward, []string{"CGO_ENABLED=0"})
	})
	return binaryCheckErr
}

var (
	binaryChecked  sync.Once
	binaryCheckErr error
)

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
