package drift

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"log/slog"
	"os"
	"path/filepath"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/nodeward/nodeward/machineconfig"
)

// deadline bounds every wait for a report: inotify and a 100 ms debounce
// answer in well under a second.
const deadline = 10 * time.Second

// quiet is how long a test waits to see that nothing is reported.
const quiet = 500 * time.Millisecond

// parse builds a Config from an Ignition config, as the MCO renders one.
func parse(t testing.TB, name, ign string) *machineconfig.Config {
	t.Helper()
	b, err := json.Marshal(map[string]any{
		"apiVersion": "machineconfiguration.openshift.io/v1", "kind": "MachineConfig",
		"metadata": map[string]any{"name": name},
		"spec":     map[string]any{"config": json.RawMessage(ign)},
	})
	if err != nil {
		t.Fatal(err)
	}
	cfg, err := machineconfig.Parse(b)
	if err != nil {
		t.Fatalf("Parse: %v", err)
	}
	return cfg
}

// testIgn is a config with files in two directories and a unit with a
// drop-in.
func testIgn(foo string) string {
	return fmt.Sprintf(`{"ignition":{"version":"3.4.0"},
  "storage":{"files":[
    {"path":"/etc/foo.conf","contents":{"source":"data:,%s"}},
    {"path":"/etc/sub/dir/secret","mode":384,"contents":{"source":"data:,s3cret"}}]},
  "systemd":{"units":[
    {"name":"hello.service","contents":"[Service]\nExecStart=/bin/true\n",
     "dropins":[{"name":"10-nice.conf","contents":"[Service]\nNice=5\n"}]}]}}`, foo)
}

// countingChecker counts the re-checks a Monitor makes.
type countingChecker struct {
	Checker
	drifts atomic.Int64
}

func (c *countingChecker) Drift(cfg *machineconfig.Config) (*machineconfig.DriftError, error) {
	c.drifts.Add(1)
	return c.Checker.Drift(cfg)
}

// fixture is a host root with a config applied and a Monitor running on it.
type fixture struct {
	root    string
	w       machineconfig.Writer
	cfg     *machineconfig.Config
	checker *countingChecker
	reports chan Report
	stop    func() error
}

func newFixture(t *testing.T, cfg *machineconfig.Config) *fixture {
	t.Helper()
	w := machineconfig.Writer{Root: t.TempDir(), StateDir: t.TempDir()}
	if err := w.Apply(context.Background(), nil, cfg); err != nil {
		t.Fatal(err)
	}
	f := &fixture{root: w.Root, w: w, cfg: cfg}
	f.start(t, cfg)
	return f
}

// start runs a Monitor for cfg; stop cancels it and returns Run's error.
func (f *fixture) start(t *testing.T, cfg *machineconfig.Config) {
	t.Helper()
	f.checker = &countingChecker{Checker: f.w}
	f.reports = make(chan Report, 16)
	m, err := New(Options{
		Checker: f.checker, Config: cfg,
		OnReport: func(_ context.Context, r Report) { f.reports <- r },
		Log:      slog.New(slog.NewTextHandler(io.Discard, nil)),
	})
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- m.Run(ctx) }()
	stop := sync.OnceValue(func() error { cancel(); return <-done })
	f.stop = stop
	t.Cleanup(func() { stop() })
	f.waitChecks(t, 1)
}

// waitChecks waits until the Monitor has made n re-checks (the first at
// start), so that its watches are armed.
func (f *fixture) waitChecks(t *testing.T, n int64) {
	t.Helper()
	tick := time.NewTicker(time.Millisecond)
	defer tick.Stop()
	timeout := time.After(deadline)
	for f.checker.drifts.Load() < n {
		select {
		case <-tick.C:
		case <-timeout:
			t.Fatalf("%d re-checks after %v, want %d", f.checker.drifts.Load(), deadline, n)
		}
	}
}

// next waits for the next report.
func (f *fixture) next(t *testing.T) Report {
	t.Helper()
	select {
	case r := <-f.reports:
		return r
	case <-time.After(deadline):
		t.Fatalf("no report within %v", deadline)
		return Report{}
	}
}

// wantDrift waits for a drift report naming path with message msg.
func (f *fixture) wantDrift(t *testing.T, path, msg string) {
	t.Helper()
	r := f.next(t)
	if r.Drift == nil || r.Drift.Path != path || r.Drift.Message != msg {
		t.Fatalf("report %+v, want drift of %s: %s", r.Drift, path, msg)
	}
}

// wantCleared waits for the report that drift is gone.
func (f *fixture) wantCleared(t *testing.T) {
	t.Helper()
	if r := f.next(t); r.Drift != nil {
		t.Fatalf("report %+v, want drift gone", *r.Drift)
	}
}

// wantNothing checks that nothing is reported for a while.
func (f *fixture) wantNothing(t *testing.T) {
	t.Helper()
	select {
	case r := <-f.reports:
		t.Fatalf("unexpected report %+v", r.Drift)
	case <-time.After(quiet):
	}
}

func (f *fixture) path(hostPath string) string { return filepath.Join(f.root, hostPath) }

func writeFile(t *testing.T, p, contents string, mode os.FileMode) {
	t.Helper()
	if err := os.MkdirAll(filepath.Dir(p), 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(p, []byte(contents), mode); err != nil {
		t.Fatal(err)
	}
	if err := os.Chmod(p, mode); err != nil {
		t.Fatal(err)
	}
}
