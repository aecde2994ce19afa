package oomkill_test

import (
	"context"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"golang.org/x/sys/unix"

	"github.com/nodeward/nodeward/oomkill"
	"github.com/nodeward/nodeward/test/kernelevents"
	"github.com/nodeward/nodeward/test/testenv"
)

// hogEnv makes the test binary a hog: it joins the cgroup named by the
// variable and allocates until the kernel kills it.
const hogEnv = "NODEWARD_OOMKILL_HOG_CGROUP"

func TestMain(m *testing.M) {
	if cg := os.Getenv(hogEnv); cg != "" {
		hog(cg)
	}
	os.Exit(m.Run())
}

func hog(cgroup string) {
	if err := os.WriteFile(filepath.Join(cgroup, "cgroup.procs"), []byte(strconv.Itoa(os.Getpid())), 0); err != nil {
		fmt.Fprintf(os.Stderr, "hog: join %s: %v\n", cgroup, err)
		os.Exit(2)
	}
	var held [][]byte
	for {
		b := make([]byte, 1<<20)
		for i := 0; i < len(b); i += 4096 {
			b[i] = 1
		}
		held = append(held, b)
		runtime.KeepAlive(held) // held, not garbage
	}
}

// hierarchy is a memory cgroup tree the test makes and removes.
type hierarchy struct {
	version oomkill.Version
	base    string // this test's directory in the memory hierarchy
}

// newHierarchy makes a directory for the test's cgroups in the host's
// memory hierarchy (v1 here, v2 where the memory controller is on it).
// The test has the kernel log to itself: its OOM kills log a report each,
// and it reads the kills' records.
func newHierarchy(t *testing.T) *hierarchy {
	t.Helper()
	testenv.RequireRoot(t)
	kernelevents.Lock(t)
	var h hierarchy
	switch {
	case exists("/sys/fs/cgroup/memory/memory.oom_control"):
		h.version, h.base = oomkill.V1, "/sys/fs/cgroup/memory"
	case v2Memory("/sys/fs/cgroup"):
		h.version, h.base = oomkill.V2, "/sys/fs/cgroup"
	default:
		testenv.Require(t, false, "no memory cgroup controller under /sys/fs/cgroup (v1 memory or v2 with memory)")
	}
	h.base = h.mkdir(t, h.base, fmt.Sprintf("nodeward-oomkill-%d-%d", os.Getpid(), time.Now().UnixNano()))
	return &h
}

func v2Memory(dir string) bool {
	b, err := os.ReadFile(filepath.Join(dir, "cgroup.controllers"))
	return err == nil && strings.Contains(" "+string(b)+" ", " memory ")
}

// mkdir makes the cgroups of rel under parent, each removed when t ends.
func (h *hierarchy) mkdir(t *testing.T, parent, rel string) string {
	t.Helper()
	dir := parent
	for _, name := range strings.Split(rel, "/") {
		if h.version == oomkill.V2 {
			// Children get the memory controller.
			os.WriteFile(filepath.Join(dir, "cgroup.subtree_control"), []byte("+memory"), 0)
		}
		dir = filepath.Join(dir, name)
		if err := os.Mkdir(dir, 0o755); err != nil {
			if errors.Is(err, os.ErrExist) {
				continue
			}
			t.Fatalf("create cgroup: %v", err)
		}
		cg := dir
		t.Cleanup(func() { testenv.RemoveCgroup(t, cg) })
	}
	return dir
}

// limit sets the cgroup's memory limit, without swap.
func (h *hierarchy) limit(t *testing.T, cg string, bytes int64) {
	t.Helper()
	files := [][2]string{{"memory.limit_in_bytes", ""}, {"memory.swappiness", "0"}}
	if h.version == oomkill.V2 {
		files = [][2]string{{"memory.max", ""}, {"memory.swap.max", "0"}}
	}
	if err := os.WriteFile(filepath.Join(cg, files[0][0]), []byte(strconv.FormatInt(bytes, 10)), 0); err != nil {
		t.Fatalf("set the memory limit of %s: %v", cg, err)
	}
	if err := os.WriteFile(filepath.Join(cg, files[1][0]), []byte(files[1][1]), 0); err != nil && !os.IsNotExist(err) {
		t.Logf("no %s for %s: %v", files[1][0], cg, err)
	}
}

// startHog starts a hog in cg; wait returns once the kernel killed it.
func startHog(t *testing.T, cg string) (pid int, wait func()) {
	t.Helper()
	cmd := exec.Command(os.Args[0], "-test.run=^$")
	cmd.Env = append(os.Environ(), hogEnv+"="+cg)
	cmd.Stderr = os.Stderr
	if err := cmd.Start(); err != nil {
		t.Fatalf("start a hog: %v", err)
	}
	done := make(chan error, 1)
	go func() { done <- cmd.Wait() }()
	t.Cleanup(func() { cmd.Process.Kill(); <-done; done <- nil })
	return cmd.Process.Pid, func() {
		t.Helper()
		select {
		case err := <-done:
			done <- err
			var exit *exec.ExitError
			if !errors.As(err, &exit) || exit.Sys().(syscall.WaitStatus).Signal() != syscall.SIGKILL {
				t.Fatalf("the hog in %s ended with %v, not killed by the kernel", cg, err)
			}
		case <-time.After(30 * time.Second):
			t.Fatalf("the hog in %s was not killed in 30 s", cg)
		}
	}
}

// watch runs a watcher on root until t ends.
func watch(t *testing.T, opts oomkill.Options) (*oomkill.Watcher, <-chan oomkill.Kill) {
	t.Helper()
	w, err := oomkill.New(opts)
	if err != nil {
		t.Fatal(err)
	}
	return run(t, w)
}

// run runs w until t ends.
func run(t *testing.T, w *oomkill.Watcher) (*oomkill.Watcher, <-chan oomkill.Kill) {
	t.Helper()
	ctx, cancel := context.WithCancel(context.Background())
	kills := make(chan oomkill.Kill, 16)
	done := make(chan error, 1)
	go func() { done <- w.Run(ctx, kills) }()
	t.Cleanup(func() {
		cancel()
		select {
		case err := <-done:
			if err != nil {
				t.Errorf("Run: %v", err)
			}
		case <-time.After(5 * time.Second):
			t.Errorf("Run did not return 5 s after its context ended")
		}
	})
	return w, kills
}

// next is the next Kill, within 10 s.
func next(t *testing.T, kills <-chan oomkill.Kill) oomkill.Kill {
	t.Helper()
	select {
	case k := <-kills:
		return k
	case <-time.After(10 * time.Second):
		t.Fatal("no Kill within 10 s")
		return oomkill.Kill{}
	}
}

// waitFor polls cond for up to 5 s.
func waitFor(t *testing.T, what string, cond func() bool) {
	t.Helper()
	for deadline := time.Now().Add(5 * time.Second); !cond(); time.Sleep(5 * time.Millisecond) {
		if time.Now().After(deadline) {
			t.Fatalf("not within 5 s: %s", what)
		}
	}
}

// sinceBoot is CLOCK_MONOTONIC as a time, to compare Kill.At with the
// kernel log's timestamps.
func sinceBoot() time.Time {
	var ts unix.Timespec
	unix.ClockGettime(unix.CLOCK_MONOTONIC, &ts)
	return time.Unix(0, ts.Nano())
}

func exists(path string) bool {
	_, err := os.Stat(path)
	return err == nil
}
