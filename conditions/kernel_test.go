package conditions

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/nodeward/nodeward/api/v1alpha1"
	"github.com/nodeward/nodeward/kmsg"
	"github.com/nodeward/nodeward/test/kernelevents"
	"github.com/nodeward/nodeward/test/testenv"
)

// The kernel probes on the real kernel log: an ext4 filesystem on a loop
// device that the kernel really remounts read-only, and look-alike lines a
// process writes to /dev/kmsg.

// kernelEvents collects the Warning Events of temporary problems.
type kernelEvents struct {
	mu   sync.Mutex
	seen []string
}

func (e *kernelEvents) add(reason, message string) {
	e.mu.Lock()
	defer e.mu.Unlock()
	e.seen = append(e.seen, reason+": "+message)
}

func (e *kernelEvents) find(reason, contains string) bool {
	e.mu.Lock()
	defer e.mu.Unlock()
	for _, s := range e.seen {
		if strings.HasPrefix(s, reason+": ") && strings.Contains(s, contains) {
			return true
		}
	}
	return false
}

// kernelMonitor runs the kernel probes (no look-back) under a
// monitor with a short quiet period, until the test ends.
func kernelMonitor(t *testing.T, events *kernelEvents) *Monitor {
	t.Helper()
	kernelevents.Lock(t)
	mon, _ := startKernelMonitor(t, events, func(*KernelConfig) {})
	return mon
}

// startKernelMonitor runs the kernel probes, configured by more, under a
// monitor until stop (or the test's end).
func startKernelMonitor(t *testing.T, events *kernelEvents, more func(*KernelConfig)) (*Monitor, func()) {
	t.Helper()
	testenv.RequireRoot(t)
	cfg := DefaultConfig()
	cfg.Kernel.Enabled = true
	cfg.Kernel.Lookback = metav1.Duration{} // none: not the records of the test before
	cfg.Kernel.Interval = metav1.Duration{Duration: 200 * time.Millisecond}
	more(&cfg.Kernel)
	if err := cfg.Validate(); err != nil {
		t.Fatal(err)
	}
	probes := buildKernelProbes(&cfg, &Env{Events: events.add})
	mon := NewMonitor(MonitorConfig{Probes: probes,
		Hysteresis: HysteresisConfig{BadSamples: 1, QuietPeriod: metav1.Duration{Duration: 300 * time.Millisecond}}})
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan struct{})
	go func() { defer close(done); mon.Run(ctx) }()
	stop := sync.OnceFunc(func() { cancel(); <-done; Close(probes) })
	t.Cleanup(stop)
	return mon, stop
}

// waitKernelCondition waits up to 10 s for cond to have status.
func waitKernelCondition(t *testing.T, mon *Monitor, cond corev1.NodeConditionType, status corev1.ConditionStatus) Condition {
	t.Helper()
	deadline := time.Now().Add(10 * time.Second)
	for {
		for _, c := range mon.Conditions() {
			if c.Type == cond && c.Status == status {
				return c
			}
		}
		if time.Now().After(deadline) {
			t.Fatalf("%s not %s within 10 s: %+v", cond, status, mon.Conditions())
		}
		select {
		case <-mon.Changes():
		case <-time.After(100 * time.Millisecond):
		}
	}
}

// An ext4 filesystem the kernel remounts read-only after an error sets
// ReadonlyFilesystem, with the taint the default policy gives it, and an
// Ext4Error Event; unmounted, the condition clears.
func TestKernelReadonlyFilesystem(t *testing.T) {
	events := &kernelEvents{}
	mon := kernelMonitor(t, events)
	fs := kernelevents.NewExt4(t)
	waitKernelCondition(t, mon, v1alpha1.ConditionReadonlyFilesystem, corev1.ConditionFalse)

	fs.Fail(t)
	c := waitKernelCondition(t, mon, v1alpha1.ConditionReadonlyFilesystem, corev1.ConditionTrue)
	if c.Reason != "FilesystemIsReadOnly" || !strings.Contains(c.Message, fs.Device) {
		t.Errorf("condition %+v: want reason FilesystemIsReadOnly naming %s", c, fs.Device)
	}
	taints := NewTaintTable(DefaultTaintPolicy()).Desired(mon.Conditions())
	if len(taints) != 1 || taints[0].Key != v1alpha1.GroupName+"/readonly-filesystem" {
		t.Errorf("taints %v: want nodeward.io/readonly-filesystem alone", taints)
	}
	if !events.find("Ext4Error", "device "+fs.Device) {
		t.Errorf("no Ext4Error event naming %s: %v", fs.Device, events.seen)
	}
	// Still read-only: still True after a few re-checks.
	time.Sleep(600 * time.Millisecond) // three re-check intervals, to see that nothing clears it
	waitKernelCondition(t, mon, v1alpha1.ConditionReadonlyFilesystem, corev1.ConditionTrue)

	fs.Unmount(t)
	waitKernelCondition(t, mon, v1alpha1.ConditionReadonlyFilesystem, corev1.ConditionFalse)
}

// An XFS filesystem the kernel shuts down sets ReadonlyFilesystem (reason
// XFSShutdown) until it is unmounted.
func TestKernelXFSShutdown(t *testing.T) {
	mon := kernelMonitor(t, &kernelEvents{})
	fs := kernelevents.NewXFS(t)
	waitKernelCondition(t, mon, v1alpha1.ConditionReadonlyFilesystem, corev1.ConditionFalse)
	fs.Fail(t)
	c := waitKernelCondition(t, mon, v1alpha1.ConditionReadonlyFilesystem, corev1.ConditionTrue)
	if c.Reason != "XFSShutdown" || !strings.Contains(c.Message, "XFS ("+fs.Device+")") {
		t.Errorf("condition %+v: want reason XFSShutdown naming %s", c, fs.Device)
	}
	fs.Unmount(t)
	waitKernelCondition(t, mon, v1alpha1.ConditionReadonlyFilesystem, corev1.ConditionFalse)
}

// A restarted agent reads the look-back again: the read-only filesystem
// logged before is found again, but the Ext4Error Event it already sent is
// not sent twice (the cursor file); without the cursor it would be.
func TestKernelRestartSendsNoEventTwice(t *testing.T) {
	kernelevents.Lock(t)
	cursor := filepath.Join(t.TempDir(), "kernel-log-cursor")
	fs := kernelevents.NewExt4(t)
	first := &kernelEvents{}
	mon, stop := startKernelMonitor(t, first, func(c *KernelConfig) { c.CursorFile = cursor })
	waitKernelCondition(t, mon, v1alpha1.ConditionReadonlyFilesystem, corev1.ConditionFalse)
	fs.Fail(t)
	waitKernelCondition(t, mon, v1alpha1.ConditionReadonlyFilesystem, corev1.ConditionTrue)
	if !first.find("Ext4Error", "device "+fs.Device) {
		t.Fatalf("no Ext4Error event naming %s: %v", fs.Device, first.seen)
	}
	stop()

	lookback := func(c *KernelConfig) { c.Lookback.Duration = time.Minute }
	again := &kernelEvents{}
	mon, stop = startKernelMonitor(t, again, func(c *KernelConfig) { lookback(c); c.CursorFile = cursor })
	waitKernelCondition(t, mon, v1alpha1.ConditionReadonlyFilesystem, corev1.ConditionTrue)
	stop()
	if again.find("Ext4Error", "device "+fs.Device) {
		t.Errorf("the restarted agent sent the Ext4Error event again: %v", again.seen)
	}

	noCursor := &kernelEvents{}
	mon, stop = startKernelMonitor(t, noCursor, lookback)
	waitKernelCondition(t, mon, v1alpha1.ConditionReadonlyFilesystem, corev1.ConditionTrue)
	stop()
	if !noCursor.find("Ext4Error", "device "+fs.Device) {
		t.Errorf("without a cursor the look-back sent no Ext4Error event: the test proves nothing: %v", noCursor.seen)
	}
}

// A process's line that copies the kernel's message (even with a priority
// prefix of facility 0) changes nothing: no condition, no Event.
func TestKernelLookAlikeChangesNothing(t *testing.T) {
	events := &kernelEvents{}
	mon := kernelMonitor(t, events)
	waitKernelCondition(t, mon, v1alpha1.ConditionReadonlyFilesystem, corev1.ConditionFalse)
	r, err := kmsg.Open(kmsg.Options{FromEnd: true})
	if err != nil {
		t.Fatal(err)
	}
	defer r.Close()
	dev := fmt.Sprintf("loop%d", 900+time.Now().Nanosecond()%99)
	kernelevents.WriteKmsg(t,
		"<3>EXT4-fs ("+dev+"): Remounting filesystem read-only",
		"<0>EXT4-fs error (device "+dev+"): ext4_lookup:1855: inode #2: comm ls: deleted inode referenced: 12",
		"<3>Out of memory: Killed process 4242 (lookalike) total-vm:1000kB, anon-rss:500kB, file-rss:0kB, shmem-rss:0kB, UID:0 pgtables:40kB oom_score_adj:0")
	// A record of the kernel's after them: once the probe has handled it,
	// it has read the look-alikes too.
	marker := kernelevents.KernelRecord(t)
	seq := markerSeq(t, r, marker)
	kernel := mon.probes[0].(*KernelProbe)
	deadline := time.Now().Add(10 * time.Second)
	for kernel.log.handledThrough() < seq {
		if time.Now().After(deadline) {
			t.Fatalf("the kernel probes did not read record %d within 10 s", seq)
		}
		time.Sleep(20 * time.Millisecond)
	}
	for _, c := range mon.Conditions() {
		if c.Status == corev1.ConditionTrue {
			t.Errorf("condition %+v after look-alike lines", c)
		}
	}
	if len(events.seen) != 0 {
		t.Errorf("events after look-alike lines: %v", events.seen)
	}
}

// markerSeq reads r until the loop device's capacity record and returns
// its sequence number.
func markerSeq(t *testing.T, r *kmsg.Reader, dev string) uint64 {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	for {
		rec, err := r.Next(ctx)
		if err != nil {
			t.Fatalf("no capacity record of %s: %v", dev, err)
		}
		if strings.Contains(rec.Message, dev+": detected capacity change") {
			return rec.Seq
		}
	}
}

// The kernel logs before it acts (ext4 prints "Remounting filesystem
// read-only" before it marks the filesystem so): a re-check that finds the
// mount still read-write right after the record keeps the problem for
// recheckSettle; once a re-check has seen it read-only, read-write clears
// it at once.
func TestKernelRecheckWaitsForTheCause(t *testing.T) {
	root := t.TempDir()
	if err := os.MkdirAll(filepath.Join(root, "1"), 0o755); err != nil {
		t.Fatal(err)
	}
	mounts := func(opts string) {
		line := "36 25 7:0 / /mnt rw,relatime shared:1 - ext4 /dev/loop7 " + opts + "\n"
		if err := os.WriteFile(filepath.Join(root, "1", "mountinfo"), []byte(line), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	now := time.Date(2026, 11, 27, 12, 0, 0, 0, time.UTC)
	cfg := DefaultConfig().Kernel
	l := newKernelLog(cfg, root, &Env{Now: func() time.Time { return now }})
	l.start.Do(func() {})                           // no reader: records are handed in below
	l.sinceBoot = func() time.Duration { return 0 } // the records below are logged now
	cond := v1alpha1.ConditionReadonlyFilesystem
	mounts("rw,errors=remount-ro")
	l.handle(kmsg.Record{Message: "EXT4-fs (loop7): Remounting filesystem read-only"})
	if s := l.sample(context.Background(), cond); s.Verdict != Unhealthy {
		t.Fatalf("right after the record, mount not read-only yet: %+v, want Unhealthy", s)
	}
	now = now.Add(recheckSettle + time.Second)
	if s := l.sample(context.Background(), cond); s.Verdict != Healthy {
		t.Fatalf("read-only never seen within %s: %+v, want Healthy", recheckSettle, s)
	}

	l.handle(kmsg.Record{Message: "EXT4-fs (loop7): Remounting filesystem read-only"})
	mounts("rw,errors=remount-ro,emergency_ro")
	if s := l.sample(context.Background(), cond); s.Verdict != Unhealthy {
		t.Fatalf("mount emergency_ro: %+v, want Unhealthy", s)
	}
	mounts("rw,errors=remount-ro")
	if s := l.sample(context.Background(), cond); s.Verdict != Healthy {
		t.Fatalf("seen read-only, now read-write: %+v, want Healthy at once", s)
	}
}
