// Package mco runs the REAL node and drain controllers of the OpenShift
// machine-config-operator (a prebuilt binary, see $NODEWARD_MCO_DIR/README.md)
// against a test/cluster control plane, so that nodeward's MCO mode is tested
// against the controller it must cooperate with rather than against our
// reading of it.
//
//	var env cluster.Env
//	func TestMain(m *testing.M) { os.Exit(env.Run(m)) }
//	func TestX(t *testing.T) {
//		cp := env.ControlPlane(t)
//		dir := mco.RequireDir(t)
//		c := mco.NewClient(t, cp.Config(), dir)
//		c.Install(ctx, mco.InstallOptions{})
//		ctrl := mco.StartController(t, dir, cp.KubeconfigPath(), mco.ControllerOptions{})
//		...
//	}
//
// The controller has no leader election: two of them against one control
// plane would both act, so tests that run one must not be parallel.
package mco

import (
	"bytes"
	"compress/gzip"
	"context"
	"crypto/sha256"
	"encoding/hex"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/nodeward/nodeward/test/cluster"
	"github.com/nodeward/nodeward/test/testenv"
)

// DirVariable names the environment variable pointing at the MCO directory
// (mco-controller.gz, crds/, examples/); default <repo root>/../shared/mco.
const DirVariable = "NODEWARD_MCO_DIR"

// FeatureSet is the OpenShift feature set the controller's gates come from.
type FeatureSet string

// The feature sets tests use. TechPreviewNoUpgrade turns on
// ImageModeStatusReporting: the pool's updated and degraded counts then come
// from MachineConfigNode status instead of the node annotations.
const (
	Default              FeatureSet = "Default"
	TechPreviewNoUpgrade FeatureSet = "TechPreviewNoUpgrade"
)

// Dir finds the MCO directory: $NODEWARD_MCO_DIR, else ../shared/mco beside
// the repository (worktrees included: it is relative to the checkout).
func Dir() (string, error) {
	dir := os.Getenv(DirVariable)
	if dir == "" {
		root, err := cluster.RepoRoot()
		if err != nil {
			return "", err
		}
		dir = filepath.Join(root, "..", "shared", "mco")
	}
	if _, err := os.Stat(filepath.Join(dir, "mco-controller.gz")); err != nil {
		return "", fmt.Errorf("MCO controller binary: %w (set %s)", err, DirVariable)
	}
	return filepath.Clean(dir), nil
}

// RequireDir returns Dir, or skips the test (fails it in CI) without it.
func RequireDir(t testing.TB) string {
	t.Helper()
	dir, err := Dir()
	testenv.Require(t, err == nil, fmt.Sprintf("the real MCO controller is not available: %v", err))
	return dir
}

var (
	binaryMu    sync.Mutex
	binaryPaths = map[string]string{} // MCO dir -> unpacked binary
)

// Binary unpacks dir/mco-controller.gz once into
// $XDG_CACHE_HOME/nodeward/mco/<sha256 of the .gz>/mco-controller and
// returns its path. The key is the file's content, so a new build is
// unpacked anew and an old one never reused; the unpacked file appears by
// rename, so concurrent test binaries never run a half-written one.
func Binary(dir string) (string, error) {
	binaryMu.Lock()
	defer binaryMu.Unlock()
	if p, ok := binaryPaths[dir]; ok {
		return p, nil
	}
	gz := filepath.Join(dir, "mco-controller.gz")
	data, err := os.ReadFile(gz)
	if err != nil {
		return "", err
	}
	sum := sha256.Sum256(data)
	cache, err := os.UserCacheDir()
	if err != nil {
		return "", err
	}
	bin := filepath.Join(cache, "nodeward", "mco", hex.EncodeToString(sum[:])[:16], "mco-controller")
	if _, err := os.Stat(bin); err != nil {
		if err := unpack(data, bin); err != nil {
			return "", fmt.Errorf("unpack %s: %w", gz, err)
		}
	}
	binaryPaths[dir] = bin
	return bin, nil
}

func unpack(gz []byte, bin string) error {
	if err := os.MkdirAll(filepath.Dir(bin), 0o755); err != nil {
		return err
	}
	r, err := gzip.NewReader(bytes.NewReader(gz))
	if err != nil {
		return err
	}
	tmp, err := os.CreateTemp(filepath.Dir(bin), ".mco-controller-*")
	if err != nil {
		return err
	}
	defer os.Remove(tmp.Name()) // after the rename: nothing
	if _, err := io.Copy(tmp, r); err != nil {
		tmp.Close()
		return err
	}
	if err := tmp.Chmod(0o755); err != nil {
		tmp.Close()
		return err
	}
	if err := tmp.Close(); err != nil {
		return err
	}
	return os.Rename(tmp.Name(), bin)
}

// ControllerOptions choose the controller's feature set and flags.
type ControllerOptions struct {
	// FeatureSet is Default when empty.
	FeatureSet FeatureSet
	// Args are extra flags, after the harness's own (so they win): for
	// example "--update-delay=1s", "--drain-controller=false", "-v=4".
	Args []string
}

func (o ControllerOptions) drain() bool {
	for _, a := range o.Args {
		if strings.TrimLeft(a, "-") == "drain-controller=false" {
			return false
		}
	}
	return true
}

// Controller is a running mco-controller process.
type Controller struct {
	t          testing.TB
	bin        string
	kubeconfig string
	logDir     string

	mu      sync.Mutex
	opts    ControllerOptions
	proc    *cluster.Process
	starts  int
	readyIn time.Duration
	logs    []string // one per start, in order
}

var (
	runningMu sync.Mutex
	running   *Controller // the one controller this test binary runs
)

// StartController unpacks the binary from dir, starts it against
// kubeconfig and waits until its node controller (and drain controller,
// unless disabled) has synced its informers and started. It is stopped when
// the test ends; its logs are written under t.TempDir() and their tail is
// printed if the test failed.
func StartController(t testing.TB, dir, kubeconfig string, opts ControllerOptions) *Controller {
	t.Helper()
	bin, err := Binary(dir)
	if err != nil {
		t.Fatalf("MCO controller: %v", err)
	}
	runningMu.Lock()
	if running != nil {
		runningMu.Unlock()
		t.Fatalf("an MCO controller already runs (test %s): tests that run one must not be parallel", running.t.Name())
	}
	c := &Controller{t: t, bin: bin, kubeconfig: kubeconfig, logDir: t.TempDir()}
	running = c
	runningMu.Unlock()
	// Registered after t.TempDir, so it runs before the logs are removed.
	t.Cleanup(func() {
		c.Stop()
		if t.Failed() {
			c.dumpLogs()
		}
		runningMu.Lock()
		running = nil
		runningMu.Unlock()
	})
	if err := c.start(opts); err != nil {
		t.Fatal(err)
	}
	return c
}

// Restart stops the controller and starts it again with opts (another
// feature set, say) against the same control plane, waiting until ready.
func (c *Controller) Restart(opts ControllerOptions) {
	c.t.Helper()
	c.Stop()
	if err := c.start(opts); err != nil {
		c.t.Fatal(err)
	}
}

func (c *Controller) start(opts ControllerOptions) error {
	if opts.FeatureSet == "" {
		opts.FeatureSet = Default
	}
	c.mu.Lock()
	c.starts++
	logPath := filepath.Join(c.logDir, fmt.Sprintf("mco-controller-%d-%s.log", c.starts, opts.FeatureSet))
	// -v=2 logs each pool sync's decisions (candidates, capacity) without
	// the per-event noise of -v=4.
	args := append([]string{"--kubeconfig=" + c.kubeconfig, "--feature-set=" + string(opts.FeatureSet), "-v=2"}, opts.Args...)
	began := time.Now()
	proc, err := cluster.StartProcess("mco-controller", c.bin, logPath, args...)
	if err != nil {
		c.mu.Unlock()
		return err
	}
	c.opts, c.proc, c.logs = opts, proc, append(c.logs, logPath)
	c.mu.Unlock()
	if err := c.waitReady(opts, proc); err != nil {
		return err
	}
	c.mu.Lock()
	c.readyIn = time.Since(began)
	c.mu.Unlock()
	c.t.Logf("mco-controller (%s) ready in %s", opts.FeatureSet, c.readyIn.Round(10*time.Millisecond))
	return nil
}

// Markers the controllers log once their informers have synced
// (pkg/controller/node and drain, Run): nothing acts before them, and the
// binary serves no health endpoint to ask instead.
const (
	nodeReadyLine  = "Starting MachineConfigController-NodeController"
	drainReadyLine = "Starting MachineConfigController-DrainController"
)

func (c *Controller) waitReady(opts ControllerOptions, proc *cluster.Process) error {
	want := []string{nodeReadyLine}
	if opts.drain() {
		want = append(want, drainReadyLine)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 90*time.Second)
	defer cancel()
	tick := time.NewTicker(100 * time.Millisecond)
	defer tick.Stop()
	for {
		data, _ := os.ReadFile(proc.LogPath())
		ready := true
		for _, w := range want {
			ready = ready && bytes.Contains(data, []byte(w))
		}
		if ready {
			return nil
		}
		select {
		case <-proc.Done():
			_, err := proc.Exited()
			return fmt.Errorf("mco-controller before ready: %w\n%s", err, cluster.Tail(data, 4096))
		case <-ctx.Done():
			return fmt.Errorf("mco-controller not ready after 90s (no %q in its log)\n%s", want, cluster.Tail(data, 4096))
		case <-tick.C:
		}
	}
}

// Stop ends the controller (SIGTERM, then SIGKILL after 10 s) and waits.
// Stopping a stopped controller does nothing.
func (c *Controller) Stop() {
	c.mu.Lock()
	proc := c.proc
	c.proc = nil
	c.mu.Unlock()
	if proc != nil {
		proc.Stop(10 * time.Second)
	}
}

// Running reports whether the controller process runs (it may have
// crashed: its log says why).
func (c *Controller) Running() bool {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.proc == nil {
		return false
	}
	gone, _ := c.proc.Exited()
	return !gone
}

// ReadyIn is how long the last start took until the controllers started.
func (c *Controller) ReadyIn() time.Duration {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.readyIn
}

// LogPath is the log of the current (or last) start.
func (c *Controller) LogPath() string {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.logs[len(c.logs)-1]
}

// LogContains reports whether the current start's log holds text, for
// assertions on what the controller decided.
func (c *Controller) LogContains(text string) bool {
	return cluster.LogContains(c.LogPath(), text)
}

// dumpLogs prints the tail of every start's log: a failed assertion on the
// controller's behaviour is explained there, and t.TempDir goes away.
func (c *Controller) dumpLogs() {
	c.mu.Lock()
	logs := slices.Clone(c.logs)
	c.mu.Unlock()
	cluster.DumpLogs(c.t, logs)
}
