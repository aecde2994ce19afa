package cluster

import (
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"sync"
)

// NodewardBuild says how the nodeward binary under test is built.
type NodewardBuild int

const (
	// ReleaseBuild is `make build`'s binary: -tags grpcnotrace.
	ReleaseBuild NodewardBuild = iota
	// StaticBuild is the binary `make image` packages: CGO_ENABLED=0 and
	// -trimpath besides. It starts where this host's C library is absent
	// or older (a container root, a FROM-scratch image), and its size and
	// memory are what the image ships.
	StaticBuild
)

// buildTags are the Makefile's BUILD_TAGS: without grpcnotrace the binary
// links golang.org/x/net/trace and is another, larger program.
const buildTags = "grpcnotrace"

// NodewardBinary returns the path of the nodeward binary built from this
// module as kind says. The first call of a test process builds it (tens of
// seconds when the Go build cache is cold), later calls return the same
// file: callers must not modify it. The file lives in BuildDir until
// RemoveBuilds; Env.Run calls that when the package's tests are done.
func NodewardBinary(kind NodewardBuild) (string, error) {
	switch kind {
	case ReleaseBuild:
		return releaseNodeward()
	case StaticBuild:
		return staticNodeward()
	}
	return "", fmt.Errorf("unknown nodeward build %d", kind)
}

var (
	releaseNodeward = sync.OnceValues(func() (string, error) {
		return buildNodeward("nodeward", nil, "-tags", buildTags)
	})
	staticNodeward = sync.OnceValues(func() (string, error) {
		return buildNodeward("nodeward-static", []string{"CGO_ENABLED=0"}, "-trimpath", "-tags", buildTags)
	})
)

// BuildDir is where this test process keeps the binaries it built. It is
// named after the process so that packages tested in parallel (go test
// ./...) never write each other's files.
func BuildDir() string {
	return filepath.Join(os.TempDir(), fmt.Sprintf("nodeward-test-build-%d", os.Getpid()))
}

// RemoveBuilds removes BuildDir. Programs that build nodeward without Env
// (the demo, the coordinator benchmark) call it before they exit.
func RemoveBuilds() error { return os.RemoveAll(BuildDir()) }

// buildNodeward builds ./cmd/nodeward into BuildDir()/name with flags, env
// added to this process's environment.
func buildNodeward(name string, env []string, flags ...string) (string, error) {
	root, err := RepoRoot()
	if err != nil {
		return "", fmt.Errorf("build nodeward: %w", err)
	}
	if err := os.MkdirAll(BuildDir(), 0o755); err != nil {
		return "", fmt.Errorf("build nodeward: %w", err)
	}
	out := filepath.Join(BuildDir(), name)
	args := append(append([]string{"build"}, flags...), "-o", out, "./cmd/nodeward")
	cmd := exec.Command("go", args...)
	cmd.Dir = root
	cmd.Env = append(os.Environ(), env...)
	if output, err := cmd.CombinedOutput(); err != nil {
		return "", fmt.Errorf("build nodeward (go %v): %w: %s", args, err, output)
	}
	return out, nil
}
