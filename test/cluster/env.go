package cluster

import (
	"bytes"
	"context"
	"flag"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/nodeward/nodeward/test/testenv"
)

// BinDirVariable names the environment variable that points at the built
// control-plane binaries; `make test` sets it.
const BinDirVariable = "NODEWARD_TESTBIN_DIR"

// Env shares one control plane among the tests of a package:
//
//	var env cluster.Env
//	func TestMain(m *testing.M) { os.Exit(env.Run(m)) }
//	func TestX(t *testing.T) { cp := env.ControlPlane(t); ... }
type Env struct {
	cp     *ControlPlane
	reason string // why cp is nil
}

// Run starts the control plane (unless -short), runs the tests and stops the
// control plane. Component logs are kept when a test failed; the nodeward
// binaries the tests built (NodewardBinary) are removed in any case.
func (e *Env) Run(m *testing.M) int {
	defer RemoveBuilds()
	return e.run(m)
}

func (e *Env) run(m *testing.M) int {
	flag.Parse()
	if testing.Short() {
		e.reason = "control plane not started in -short mode"
		return m.Run()
	}
	if err := e.start(); err != nil {
		if testenv.InCI() {
			fmt.Fprintln(os.Stderr, "cluster: cannot start the control plane:", err)
			return 1
		}
		e.reason = "control plane unavailable: " + err.Error()
		return m.Run()
	}
	code := m.Run()
	e.cp.Stop()
	if code != 0 {
		fmt.Fprintf(os.Stderr, "cluster: component logs kept in %s\n", e.cp.Dir())
	} else {
		os.RemoveAll(e.cp.Dir())
	}
	return code
}

func (e *Env) start() error {
	binDir, err := findBinDir()
	if err != nil {
		return err
	}
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	e.cp, err = Start(ctx, Options{BinDir: binDir, Log: func(format string, args ...any) {
		if testing.Verbose() {
			fmt.Fprintf(os.Stderr, "cluster: "+format+"\n", args...)
		}
	}})
	return err
}

// ControlPlane returns the shared control plane, or skips the test (fails it
// in CI) when there is none.
func (e *Env) ControlPlane(t testing.TB) *ControlPlane {
	t.Helper()
	testenv.Require(t, e.cp != nil, e.reason)
	return e.cp
}

// findBinDir is $NODEWARD_TESTBIN_DIR or, when unset, the cache directory of
// test/tools/install.sh, which builds what is missing (minutes when cold,
// nothing when warm) but the Machine API controllers.
func findBinDir() (string, error) {
	if dir := os.Getenv(BinDirVariable); dir != "" {
		return dir, nil
	}
	root, err := RepoRoot()
	if err != nil {
		return "", err
	}
	var stdout, stderr bytes.Buffer
	cmd := exec.Command("bash", filepath.Join(root, "test", "tools", "install.sh"))
	// Not the Machine API controllers nor CRI-O: minutes more each on a
	// cold cache, for test/machineapi and test/node's CRI-O node alone,
	// which ask for `make testbin` without them.
	cmd.Env = append(os.Environ(), "NODEWARD_TESTBIN_MACHINE_API=skip", "NODEWARD_TESTBIN_CRIO=skip")
	cmd.Stdout = &stdout
	cmd.Stderr = &stderr
	if err := cmd.Run(); err != nil {
		return "", fmt.Errorf("build control-plane binaries: %w: %s", err, firstLines(stderr.String(), 20))
	}
	lines := strings.Split(strings.TrimSpace(stdout.String()), "\n")
	return lines[len(lines)-1], nil
}

// RepoRoot is the nodeward module's root directory, found upwards from the
// working directory (a test's package directory).
func RepoRoot() (string, error) {
	dir, err := os.Getwd()
	if err != nil {
		return "", err
	}
	for {
		if data, err := os.ReadFile(filepath.Join(dir, "go.mod")); err == nil &&
			bytes.HasPrefix(data, []byte("module github.com/nodeward/nodeward\n")) {
			return dir, nil
		}
		parent := filepath.Dir(dir)
		if parent == dir {
			return "", fmt.Errorf("no nodeward go.mod above the working directory")
		}
		dir = parent
	}
}

// BinDir finds the control-plane binaries as Env does ($NODEWARD_TESTBIN_DIR,
// else test/tools/install.sh's cache), for tests that start a control plane
// of their own (one they crash and restart, say).
func BinDir() (string, error) { return findBinDir() }
