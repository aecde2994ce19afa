package drift

import (
	"context"
	"os"
	"testing"
	"time"

	testingclock "k8s.io/utils/clock/testing"

	"github.com/nodeward/nodeward/machineconfig"
)

// TestMonitorContentDriftAndRestore: an edited file is reported with the
// MCD's message; putting its content back clears it.
func TestMonitorContentDriftAndRestore(t *testing.T) {
	f := newFixture(t, parse(t, "rendered-worker-1", testIgn("hello")))
	f.wantNothing(t)

	writeFile(t, f.path("/etc/foo.conf"), "tampered", 0o644)
	f.wantDrift(t, "/etc/foo.conf", `content mismatch for file "/etc/foo.conf"`)

	writeFile(t, f.path("/etc/foo.conf"), "hello", 0o644)
	f.wantCleared(t)
}

func TestMonitorModeDrift(t *testing.T) {
	f := newFixture(t, parse(t, "rendered-worker-1", testIgn("hello")))
	if err := os.Chmod(f.path("/etc/sub/dir/secret"), 0o644); err != nil {
		t.Fatal(err)
	}
	f.wantDrift(t, "/etc/sub/dir/secret",
		`mode mismatch for file: "/etc/sub/dir/secret"; expected: -rw-------/384/0600; received: -rw-r--r--/420/0644`)
	if err := os.Chmod(f.path("/etc/sub/dir/secret"), 0o600); err != nil {
		t.Fatal(err)
	}
	f.wantCleared(t)
}

func TestMonitorDeletedFile(t *testing.T) {
	f := newFixture(t, parse(t, "rendered-worker-1", testIgn("hello")))
	if err := os.Remove(f.path("/etc/foo.conf")); err != nil {
		t.Fatal(err)
	}
	f.wantDrift(t, "/etc/foo.conf",
		`could not stat file "/etc/foo.conf": lstat /etc/foo.conf: no such file or directory`)
}

func TestMonitorDropinEdited(t *testing.T) {
	f := newFixture(t, parse(t, "rendered-worker-1", testIgn("hello")))
	const dropin = "/etc/systemd/system/hello.service.d/10-nice.conf"
	writeFile(t, f.path(dropin), "[Service]\nNice=-20\n", 0o644)
	f.wantDrift(t, dropin, `content mismatch for file "`+dropin+`"`)
}

// TestMonitorIgnoresOtherFiles: a file the config does not name, in a
// watched directory, is neither reported nor re-checked.
func TestMonitorIgnoresOtherFiles(t *testing.T) {
	f := newFixture(t, parse(t, "rendered-worker-1", testIgn("hello")))
	writeFile(t, f.path("/etc/other.conf"), "mine", 0o644)
	writeFile(t, f.path("/etc/systemd/system/other.service"), "[Service]\n", 0o644)
	f.wantNothing(t)
	if n := f.checker.drifts.Load(); n != 1 {
		t.Fatalf("%d re-checks, want only the first", n)
	}
	// Still watching.
	writeFile(t, f.path("/etc/foo.conf"), "tampered", 0o644)
	f.wantDrift(t, "/etc/foo.conf", `content mismatch for file "/etc/foo.conf"`)
}

// TestMonitorDirectoryRecreated: a config's directory removed is watched
// through its nearest existing ancestor, and again once created anew.
func TestMonitorDirectoryRecreated(t *testing.T) {
	f := newFixture(t, parse(t, "rendered-worker-1", testIgn("hello")))
	if err := os.RemoveAll(f.path("/etc/sub")); err != nil {
		t.Fatal(err)
	}
	f.wantDrift(t, "/etc/sub/dir/secret",
		`could not stat file "/etc/sub/dir/secret": lstat /etc/sub/dir/secret: no such file or directory`)
	// Created step by step: each level is seen through its parent.
	writeFile(t, f.path("/etc/sub/dir/secret"), "s3cret", 0o644)
	f.wantDrift(t, "/etc/sub/dir/secret",
		`mode mismatch for file: "/etc/sub/dir/secret"; expected: -rw-------/384/0600; received: -rw-r--r--/420/0644`)
	if err := os.Chmod(f.path("/etc/sub/dir/secret"), 0o600); err != nil {
		t.Fatal(err)
	}
	f.wantCleared(t)
}

// TestMonitorRestartForNewConfig: the agent stops the Monitor, applies a
// new config and starts one for it; drift present at a start is reported.
func TestMonitorRestartForNewConfig(t *testing.T) {
	f := newFixture(t, parse(t, "rendered-worker-1", testIgn("hello")))
	if err := f.stop(); err != nil {
		t.Fatalf("Run = %v", err)
	}
	next := parse(t, "rendered-worker-2", testIgn("bonjour"))
	f.start(t, next) // before the update: the host still holds the old config
	f.wantDrift(t, "/etc/foo.conf", `content mismatch for file "/etc/foo.conf"`)
	if err := f.w.Apply(context.Background(), f.cfg, next); err != nil {
		t.Fatal(err)
	}
	f.wantCleared(t)
	if err := f.stop(); err != nil {
		t.Fatalf("Run = %v", err)
	}
}

// fakeChecker reports a drift the test sets; it names no path to watch.
type fakeChecker struct {
	drift   chan *machineconfig.DriftError
	checked chan struct{}
}

func (c *fakeChecker) Paths(*machineconfig.Config) ([]string, error) { return nil, nil }

func (c *fakeChecker) Drift(*machineconfig.Config) (*machineconfig.DriftError, error) {
	defer func() { c.checked <- struct{}{} }()
	select {
	case d := <-c.drift:
		return d, nil
	default:
		return nil, nil
	}
}

// TestMonitorPeriodicRecheck: without an event, the periodic re-check
// finds drift, on the injected clock.
func TestMonitorPeriodicRecheck(t *testing.T) {
	clk := testingclock.NewFakeClock(time.Unix(1e9, 0))
	c := &fakeChecker{drift: make(chan *machineconfig.DriftError, 1), checked: make(chan struct{}, 4)}
	reports := make(chan Report, 1)
	m, err := New(Options{Checker: c, Config: &machineconfig.Config{Name: "rendered-1"}, Clock: clk,
		Interval: time.Minute, OnReport: func(_ context.Context, r Report) { reports <- r }})
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- m.Run(ctx) }()
	defer func() { cancel(); <-done }()
	<-c.checked // the first check; the ticker is running
	c.drift <- &machineconfig.DriftError{Path: "/etc/foo", Message: `content mismatch for file "/etc/foo"`}
	clk.Step(time.Minute)
	select {
	case r := <-reports:
		if r.Drift == nil || r.Drift.Path != "/etc/foo" || !r.At.Equal(clk.Now()) {
			t.Fatalf("report %+v at %v", r.Drift, r.At)
		}
	case <-time.After(deadline):
		t.Fatal("no report from the periodic re-check")
	}
}

func TestMonitorRunTwiceRefused(t *testing.T) {
	c := &fakeChecker{drift: make(chan *machineconfig.DriftError), checked: make(chan struct{}, 4)}
	m, err := New(Options{Checker: c, Config: &machineconfig.Config{}, OnReport: func(context.Context, Report) {}})
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- m.Run(ctx) }()
	<-c.checked
	if err := m.Run(ctx); err == nil {
		t.Fatal("a second Run at once was accepted")
	}
	cancel()
	if err := <-done; err != nil {
		t.Fatalf("Run = %v", err)
	}
}

func TestNewRefusesMissingOptions(t *testing.T) {
	for _, o := range []Options{
		{Config: &machineconfig.Config{}, OnReport: func(context.Context, Report) {}},
		{Checker: &fakeChecker{}, OnReport: func(context.Context, Report) {}},
		{Checker: &fakeChecker{}, Config: &machineconfig.Config{}},
		{Checker: &fakeChecker{}, Config: &machineconfig.Config{}, OnReport: func(context.Context, Report) {}, Debounce: -1},
	} {
		if _, err := New(o); err == nil {
			t.Errorf("New(%+v) accepted", o)
		}
	}
}

// TestTargetsBoundAndAncestors: directories are deduplicated, a missing
// one is replaced by its nearest existing ancestor, and past the bound
// the rest are counted, not watched.
func TestTargetsBoundAndAncestors(t *testing.T) {
	root := t.TempDir()
	for _, d := range []string{"a", "b", "c"} {
		if err := os.Mkdir(root+"/"+d, 0o755); err != nil {
			t.Fatal(err)
		}
	}
	paths := []string{root + "/a/1", root + "/a/2", root + "/b/1", root + "/c/1", root + "/missing/deep/1"}
	got := targetsOf(paths, 10)
	want := []string{root, root + "/a", root + "/b", root + "/c"}
	if len(got.dirs) != len(want) || got.dropped != 0 {
		t.Fatalf("dirs %v dropped %d, want %v", got.dirs, got.dropped, want)
	}
	for i := range want {
		if got.dirs[i] != want[i] {
			t.Fatalf("dirs %v, want %v", got.dirs, want)
		}
	}
	if !got.interesting[root+"/missing"] || !got.interesting[root+"/a/1"] || got.interesting[root+"/a/3"] {
		t.Fatalf("interesting %v", got.interesting)
	}
	bounded := targetsOf(paths, 2)
	if len(bounded.dirs) != 2 || bounded.dropped != 2 {
		t.Fatalf("bounded: dirs %v dropped %d", bounded.dirs, bounded.dropped)
	}
}
