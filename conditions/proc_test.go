package conditions

import (
	"context"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus/testutil"
	"golang.org/x/sys/unix"

	"github.com/nodeward/nodeward/test/testenv"
)

// writeProc lays out a fixture /proc with the files the probes read.
func writeProc(t *testing.T, files map[string]string) string {
	t.Helper()
	root := t.TempDir()
	for name, content := range files {
		path := filepath.Join(root, name)
		if err := os.MkdirAll(filepath.Dir(path), 0o755); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(path, []byte(content), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	return root
}

func meminfo(totalKB, availKB int) string {
	return "MemTotal:       " + itoa(totalKB) + " kB\nMemFree:        1000 kB\nMemAvailable:   " + itoa(availKB) + " kB\n"
}

func itoa(n int) string { return strconv.Itoa(n) }

const calmPSI = "some avg10=0.00 avg60=0.00 avg300=0.00 total=100\nfull avg10=0.00 avg60=0.00 avg300=0.00 total=50\n"

func TestMemoryProbeFixtures(t *testing.T) {
	t.Parallel()
	cfg := DefaultConfig().Memory
	cfg.MinAvailableBytes = 512 << 20
	cases := []struct {
		name   string
		files  map[string]string
		health Verdict
		reason string
	}{
		{"plenty", map[string]string{"meminfo": meminfo(8<<20, 4<<20), "pressure/memory": calmPSI}, Healthy, "MemoryAvailable"},
		{"below percent", map[string]string{"meminfo": meminfo(8<<20, 200<<10), "pressure/memory": calmPSI}, Unhealthy, "MemoryPressure"},
		{"below bytes", map[string]string{"meminfo": meminfo(100<<20, 400<<10), "pressure/memory": calmPSI}, Unhealthy, "MemoryPressure"},
		{"psi full", map[string]string{"meminfo": meminfo(8<<20, 4<<20),
			"pressure/memory": "some avg10=40.00 avg60=10.00 avg300=1.00 total=9000000\nfull avg10=25.50 avg60=5.00 avg300=1.00 total=4000000\n"}, Unhealthy, "MemoryPressure"},
		{"no psi on an old kernel", map[string]string{"meminfo": meminfo(8<<20, 4<<20)}, Healthy, "MemoryAvailable"},
		{"no meminfo", map[string]string{"pressure/memory": calmPSI}, Unknown, "MeminfoUnreadable"},
	}
	for _, c := range cases {
		root := writeProc(t, c.files)
		s := NewMemoryProbe(cfg, root, nil).Sample(context.Background())
		if s.Verdict != c.health || s.Reason != c.reason || s.Message == "" {
			t.Errorf("%s: %v %s %q, want %v %s", c.name, s.Verdict, s.Reason, s.Message, c.health, c.reason)
		}
	}
}

func TestPIDsProbeFixtures(t *testing.T) {
	t.Parallel()
	cfg := DefaultConfig().PIDs
	proc := func(loadavg, pidMax, threadsMax string) string {
		return writeProc(t, map[string]string{"loadavg": loadavg, "sys/kernel/pid_max": pidMax, "sys/kernel/threads-max": threadsMax})
	}
	cases := []struct {
		name   string
		root   string
		health Verdict
	}{
		{"few", proc("0.10 0.20 0.30 2/345 6789\n", "4194304\n", "100000\n"), Healthy},
		// threads-max is the lower limit here: 95 000 of 100 000 is 95%.
		{"near threads-max", proc("0.10 0.20 0.30 2/95000 6789\n", "4194304\n", "100000\n"), Unhealthy},
		{"near pid_max", proc("1 1 1 1/31000 2\n", "32768\n", "1000000\n"), Unhealthy},
		{"garbled loadavg", proc("0.10 0.20\n", "32768\n", "100000\n"), Unknown},
		{"no pid_max", writeProc(t, map[string]string{"loadavg": "0 0 0 1/2 3\n"}), Unknown},
	}
	for _, c := range cases {
		if s := NewPIDsProbe(cfg, c.root, nil).Sample(context.Background()); s.Verdict != c.health {
			t.Errorf("%s: %v (%s), want %v", c.name, s.Verdict, s.Message, c.health)
		}
	}
}

// TestRealProcSmoke: the probes read this machine's /proc.
func TestRealProcSmoke(t *testing.T) {
	t.Parallel()
	cfg := DefaultConfig()
	for _, p := range []Probe{NewMemoryProbe(cfg.Memory, "/proc", nil), NewPIDsProbe(cfg.PIDs, "/proc", nil)} {
		if s := p.Sample(context.Background()); s.Verdict == Unknown {
			t.Errorf("%s on the real /proc: Unknown (%s)", p.Name(), s.Message)
		}
	}
}

// TestPSITriggerRegistersOnRealProc: the kernel accepts the default
// trigger (a 2 s window, legal unprivileged too) and the watch ends with
// its context; a fixture file is refused with the reason.
func TestPSITriggerRegistersOnRealProc(t *testing.T) {
	t.Parallel()
	testenv.Require(t, fileExists("/proc/pressure/memory"), "kernel without PSI")
	probe := NewMemoryProbe(DefaultConfig().Memory, "/proc", nil)
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- probe.Watch(ctx, make(chan struct{}, 1)) }()
	select {
	case err := <-done:
		t.Fatalf("trigger watch ended at once: %v", err)
	case <-time.After(300 * time.Millisecond):
	}
	cancel()
	select {
	case err := <-done:
		if err != nil {
			t.Fatalf("watch after cancel: %v", err)
		}
	case <-time.After(5 * time.Second):
		t.Fatal("trigger watch did not stop with its context")
	}

	fixture := NewMemoryProbe(DefaultConfig().Memory, writeProc(t, map[string]string{"pressure/memory": calmPSI}), nil)
	err := fixture.Watch(context.Background(), make(chan struct{}, 1))
	if err == nil || !strings.Contains(err.Error(), "not on procfs") {
		t.Errorf("fixture trigger: %v, want a refusal saying it is not procfs", err)
	}
	odd := DefaultConfig().Memory
	odd.Trigger = "some 150000 1500000" // not a multiple of 2 s
	if !hasCapability(t, unix.CAP_SYS_RESOURCE) {
		// The kernel refuses the window: the probe polls the totals.
		probe := NewMemoryProbe(odd, "/proc", nil)
		ctx, cancel := context.WithCancel(context.Background())
		done := watchArmed(ctx, t, probe, "/proc with a 1.5 s window")
		if !pollingTotals(probe) {
			t.Errorf("unprivileged 1.5 s window: the kernel's trigger armed, want the totals polled")
		}
		cancel()
		if err := <-done; err != nil {
			t.Errorf("polling after cancel: %v", err)
		}
	}
}

// TestPSITriggerFiresUnderRealMemoryPressure: real memory stall (a
// thrasher in a 32 MiB memory cgroup) fires a kernel trigger with a 2 s
// window (which the kernel gives unprivileged agents too) on the real
// /proc, and a sample taken then is bad because of it; once the thrasher
// stops, samples turn healthy again.
func TestPSITriggerFiresUnderRealMemoryPressure(t *testing.T) {
	t.Parallel()
	thrash := testenv.NewMemoryThrash(t, 32<<20)
	cfg := DefaultConfig().Memory
	cfg.MinAvailablePercent = 0 // only PSI decides here
	cfg.Trigger = "full 150000 2000000"
	probe := NewMemoryProbe(cfg, "/proc", nil)
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	wake := make(chan struct{}, 1)
	notified := make(chan error, 1)
	go func() { notified <- probe.Watch(ctx, wake) }()
	// Wait until the kernel has accepted the trigger before the stall starts.
	waitUntil(t, 10*time.Second, "the trigger to be armed", func() bool { return triggerArmed(probe) })
	stop := thrash.Start(t)
	select {
	case <-wake:
	case err := <-notified:
		t.Fatalf("trigger watch ended: %v", err)
	case <-time.After(60 * time.Second):
		t.Fatal("no PSI trigger event in 60 s of memory thrashing")
	}
	s := probe.Sample(ctx)
	if s.Verdict != Unhealthy || !strings.Contains(s.Message, "PSI trigger") {
		t.Fatalf("sample after the trigger event: %v %q, want Unhealthy naming the trigger", s.Verdict, s.Message)
	}
	stop()
	waitUntil(t, 30*time.Second, "a healthy sample after the thrashing stopped", func() bool {
		return probe.Sample(ctx).Verdict == Healthy
	})
}

// TestPSIPollerDetectsRealMemoryStall: where the kernel refuses the default
// trigger's 1 s window (no CAP_SYS_RESOURCE, as on this project's
// machines), the probe polls the stall totals, and real memory stall (the
// thrasher) wakes it within a second of the thrasher's start, the
// sample then bad because of the polled stall; once the thrasher stops,
// samples turn healthy again. Without stall the reading rests (every
// 500 ms instead of 100), and the stall's start brings the short period
// back.
func TestPSIPollerDetectsRealMemoryStall(t *testing.T) {
	t.Parallel()
	testenv.Require(t, !hasCapability(t, unix.CAP_SYS_RESOURCE), "CAP_SYS_RESOURCE held: the kernel accepts the 1 s trigger")
	thrash := testenv.NewMemoryThrash(t, 32<<20)
	cfg := DefaultConfig().Memory
	cfg.MinAvailablePercent, cfg.PSIFullAvg10Percent = 0, 0 // only the polled stall decides here
	probe := NewMemoryProbe(cfg, "/proc", nil)
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	wake := make(chan struct{}, 1)
	done := make(chan error, 1)
	go func() { done <- probe.Watch(ctx, wake) }()
	waitUntil(t, 10*time.Second, "the totals to be polled", func() bool { return pollingTotals(probe) })
	// Quiet: the reading rests after a window without stall.
	poller := probe.poller.Load()
	waitUntil(t, 20*time.Second, "the reading to rest without stall", func() bool { return !poller.fast.Load() })
	if s := probe.Sample(ctx); s.Verdict != Healthy {
		t.Skipf("memory stall on the host before the thrasher: %q", s.Message)
	}
	select {
	case <-wake:
	default:
	}
	start := time.Now()
	stop := thrash.Start(t)
	select {
	case <-wake:
	case err := <-done:
		t.Fatalf("polling ended: %v", err)
	case <-time.After(60 * time.Second):
		t.Fatal("no crossing in 60 s of memory thrashing")
	}
	took := time.Since(start)
	s := probe.Sample(ctx)
	if s.Verdict != Unhealthy || !strings.Contains(s.Message, "polled") {
		t.Fatalf("sample after the crossing: %v %q, want Unhealthy naming the polled stall", s.Verdict, s.Message)
	}
	// How soon is the benchmark's to say (BenchmarkMemoryDetectionToTaint,
	// docs/benchmarks.md), not a timed test's.
	t.Logf("thrasher start → crossing in %v: %s", took, s.Message)
	if !poller.fast.Load() {
		t.Error("the totals are not read at the short period while the thrasher runs")
	}
	stop()
	waitUntil(t, 30*time.Second, "a healthy sample after the thrashing stopped", func() bool {
		return probe.Sample(ctx).Verdict == Healthy
	})
	waitUntil(t, 20*time.Second, "the reading to rest again", func() bool { return !poller.fast.Load() })
}

func triggerArmed(p *MemoryProbe) bool {
	return testutil.ToFloat64(p.metrics.triggerActive) == 1
}

// pollingTotals: the kernel refused the trigger's window and the probe
// polls the stall totals instead.
func pollingTotals(p *MemoryProbe) bool {
	return testutil.ToFloat64(p.metrics.polling) == 1 && p.poller.Load() != nil
}

func waitUntil(t *testing.T, timeout time.Duration, what string, ok func() bool) {
	t.Helper()
	deadline := time.Now().Add(timeout)
	for !ok() {
		if time.Now().After(deadline) {
			t.Fatalf("timed out after %v waiting for %s", timeout, what)
		}
		time.Sleep(50 * time.Millisecond)
	}
}

// watchArmed runs the probe's trigger watch until ctx ends and waits until
// it is armed, or polls the totals where the kernel refused the trigger;
// the channel gives the watch's result.
func watchArmed(ctx context.Context, t *testing.T, probe *MemoryProbe, where string) <-chan error {
	t.Helper()
	done := make(chan error, 1)
	go func() { done <- probe.Watch(ctx, make(chan struct{}, 1)) }()
	deadline := time.After(10 * time.Second)
	for !triggerArmed(probe) && !pollingTotals(probe) {
		select {
		case err := <-done:
			t.Fatalf("trigger watch on %s ended: %v", where, err)
		case <-deadline:
			t.Fatalf("trigger on %s never armed", where)
		case <-time.After(20 * time.Millisecond):
		}
	}
	return done
}

// TestPSITriggerWithReadOnlyHostProc: the DaemonSet mounts the host's /proc
// read-only at /host/proc, where writing a trigger fails with EROFS; the
// probe then arms the trigger on its own /proc, whose PSI is the same
// system-wide figures.
func TestPSITriggerWithReadOnlyHostProc(t *testing.T) {
	t.Parallel()
	testenv.RequireRoot(t)
	testenv.Require(t, fileExists("/proc/pressure/memory"), "kernel without PSI")
	root := t.TempDir()
	if err := unix.Mount("proc", root, "proc", unix.MS_RDONLY, ""); err != nil {
		t.Fatalf("mount a read-only procfs: %v", err)
	}
	t.Cleanup(func() { unix.Unmount(root, unix.MNT_DETACH) })
	if fd, err := unix.Open(root+"/pressure/memory", unix.O_RDWR, 0); err == nil {
		unix.Close(fd)
		t.Fatal("the read-only procfs accepted a write open; the test proves nothing")
	}
	probe := NewMemoryProbe(DefaultConfig().Memory, root, nil)
	ctx, cancel := context.WithCancel(context.Background())
	done := watchArmed(ctx, t, probe, "a read-only host /proc")
	if s := probe.Sample(ctx); s.Verdict == Unknown {
		t.Errorf("sample from the read-only /proc: %v %q", s.Verdict, s.Message)
	}
	cancel()
	if err := <-done; err != nil {
		t.Errorf("watch after cancel: %v", err)
	}
}
