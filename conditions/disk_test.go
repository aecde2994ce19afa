package conditions

import (
	"context"
	"fmt"
	"log/slog"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"golang.org/x/sys/unix"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/nodeward/nodeward/api/v1alpha1"
	"github.com/nodeward/nodeward/test/testenv"
)

// mountTmpfs mounts a small tmpfs in a temporary directory.
func mountTmpfs(t *testing.T, options string) string {
	t.Helper()
	testenv.RequireRoot(t)
	dir := t.TempDir()
	if err := unix.Mount("tmpfs", dir, "tmpfs", 0, options); err != nil {
		t.Fatalf("mount tmpfs on %s: %v", dir, err)
	}
	t.Cleanup(func() { unix.Unmount(dir, unix.MNT_DETACH) })
	return dir
}

func fill(t *testing.T, path string, bytes int) {
	t.Helper()
	if err := os.WriteFile(path, make([]byte, bytes), 0o600); err != nil {
		t.Fatal(err)
	}
}

func TestDiskProbeOnTmpfs(t *testing.T) {
	t.Parallel()
	mnt := mountTmpfs(t, "size=4m,nr_inodes=100")
	if err := os.Mkdir(filepath.Join(mnt, "sub"), 0o755); err != nil {
		t.Fatal(err)
	}
	cfg := DiskConfig{Enabled: true, Paths: []string{mnt, filepath.Join(mnt, "sub"), "/nonexistent-nodeward"},
		MinAvailablePercent: 50, MinInodesFreePercent: 20, PollInterval: metav1.Duration{Duration: time.Second}}
	probe := NewDiskProbe(cfg, nil)
	s := probe.Sample(context.Background())
	if s.Verdict != Healthy || strings.Count(s.Message, mnt) != 1 {
		t.Fatalf("empty tmpfs: %v %q; want healthy with the device measured once", s.Verdict, s.Message)
	}
	fill(t, filepath.Join(mnt, "big"), 3<<20)
	if s := probe.Sample(context.Background()); s.Verdict != Unhealthy || !strings.Contains(s.Message, "bytes available") {
		t.Fatalf("3 of 4 MiB used: %v %q", s.Verdict, s.Message)
	}
	os.Remove(filepath.Join(mnt, "big"))
	for i := range 90 {
		fill(t, filepath.Join(mnt, fmt.Sprintf("f%d", i)), 0)
	}
	if s := probe.Sample(context.Background()); s.Verdict != Unhealthy || !strings.Contains(s.Message, "inodes free") {
		t.Fatalf("90 of 100 inodes used: %v %q", s.Verdict, s.Message)
	}
	gone := NewDiskProbe(DiskConfig{Paths: []string{"/nonexistent-nodeward"}}, nil).Sample(context.Background())
	if gone.Verdict != Unknown {
		t.Errorf("no measurable path: %v, want Unknown", gone.Verdict)
	}
}

// TestDiskConditionFollowsWithHysteresis: filled past the threshold the
// condition turns True at the next sample; emptied, it clears only after
// the quiet period.
func TestDiskConditionFollowsWithHysteresis(t *testing.T) {
	t.Parallel()
	mnt := mountTmpfs(t, "size=4m")
	cfg := DiskConfig{Enabled: true, Paths: []string{mnt}, MinAvailablePercent: 50, MinInodesFreePercent: 1,
		PollInterval: metav1.Duration{Duration: 50 * time.Millisecond}}
	quiet := 1500 * time.Millisecond
	mon := NewMonitor(MonitorConfig{Probes: []Probe{NewDiskProbe(cfg, nil)},
		Hysteresis: HysteresisConfig{BadSamples: 2, QuietPeriod: metav1.Duration{Duration: quiet}}, Log: slog.New(slog.DiscardHandler)})
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	go mon.Run(ctx)

	status := func() corev1.ConditionStatus { return mon.Conditions()[0].Status }
	waitStatus(t, 5*time.Second, status, corev1.ConditionFalse)
	fill(t, filepath.Join(mnt, "big"), 3<<20)
	waitStatus(t, 5*time.Second, status, corev1.ConditionTrue)
	if c := mon.Conditions()[0]; c.Type != v1alpha1.ConditionDiskPressure || c.Reason != "DiskPressure" {
		t.Errorf("condition %+v", c)
	}
	emptied := time.Now()
	os.Remove(filepath.Join(mnt, "big"))
	waitStatus(t, 10*time.Second, status, corev1.ConditionFalse)
	if held := time.Since(emptied); held < quiet-100*time.Millisecond {
		t.Errorf("condition cleared %v after the disk was emptied, before the %v quiet period", held, quiet)
	}
}

func waitStatus(t *testing.T, timeout time.Duration, get func() corev1.ConditionStatus, want corev1.ConditionStatus) {
	t.Helper()
	deadline := time.Now().Add(timeout)
	for get() != want {
		if time.Now().After(deadline) {
			t.Fatalf("condition still %s after %v, want %s", get(), timeout, want)
		}
		time.Sleep(10 * time.Millisecond)
	}
}
