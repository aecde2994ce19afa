package oomkill

import (
	"context"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"
)

// The v2 watcher on a fake hierarchy: directories and memory.events.local
// files on an ordinary filesystem, written by the test. It proves the
// discovery and the counter reading of the v2 code with real inotify, not
// that the kernel notifies (TestRealOOMKill does, on a v2 host).
func TestV2Fake(t *testing.T) {
	root := filepath.Join(t.TempDir(), "kubepods.slice")
	pod := filepath.Join(root, "kubepods-burstable.slice", "kubepods-burstable-pod5c1e3b6a_9d2f_4e8b_a7c4_0f1e2d3c4b5a.slice")
	cg := filepath.Join(pod, "cri-containerd-0123abcd.scope")
	for _, dir := range []string{root, filepath.Dir(pod), pod, cg} {
		fakeCgroup(t, dir, 3) // kills before the start are not reported
	}
	w := newWatcher(Options{}, root, V2)
	ctx, cancel := context.WithCancel(context.Background())
	kills := make(chan Kill, 4)
	done := make(chan error, 1)
	go func() { done <- w.Run(ctx, kills) }()
	defer func() {
		cancel()
		if err := <-done; err != nil {
			t.Errorf("Run: %v", err)
		}
	}()
	waitUntil(t, func() bool { return w.Watched() == 4 })

	setKills(t, cg, 5)
	want(t, kills, Kill{Cgroup: cg, PodUID: "5c1e3b6a-9d2f-4e8b-a7c4-0f1e2d3c4b5a", ContainerID: "0123abcd", Count: 2, Total: 5})

	// A cgroup appears with its files (as cgroupfs makes them), here by a
	// rename into the tree, and counts from zero.
	staged := filepath.Join(t.TempDir(), "staged")
	fakeCgroup(t, staged, 1)
	late := filepath.Join(pod, "cri-containerd-ffff.scope")
	if err := os.Rename(staged, late); err != nil {
		t.Fatal(err)
	}
	want(t, kills, Kill{Cgroup: late, PodUID: "5c1e3b6a-9d2f-4e8b-a7c4-0f1e2d3c4b5a", ContainerID: "ffff", Count: 1, Total: 1})
	waitUntil(t, func() bool { return w.Watched() == 5 })

	if err := os.RemoveAll(late); err != nil {
		t.Fatal(err)
	}
	waitUntil(t, func() bool { return w.Watched() == 4 })
	setKills(t, cg, 6)
	want(t, kills, Kill{Cgroup: cg, PodUID: "5c1e3b6a-9d2f-4e8b-a7c4-0f1e2d3c4b5a", ContainerID: "0123abcd", Count: 1, Total: 6})

	// The root vanishes (the kubelet's cgroups torn down) and comes back:
	// it is found again within rootRetry, its cgroups new.
	if err := os.RemoveAll(root); err != nil {
		t.Fatal(err)
	}
	waitUntil(t, func() bool { return w.Watched() == 0 })
	// Made elsewhere and renamed into place: cgroupfs shows a new cgroup
	// with its files (kernfs_activate), which mkdir and write cannot fake.
	staged = filepath.Join(filepath.Dir(root), "staged")
	for _, dir := range []string{root, filepath.Dir(pod), pod} {
		fakeCgroup(t, filepath.Join(staged, strings.TrimPrefix(dir, root)), 0)
	}
	fakeCgroup(t, filepath.Join(staged, strings.TrimPrefix(cg, root)), 1)
	if err := os.Rename(staged, root); err != nil {
		t.Fatal(err)
	}
	want(t, kills, Kill{Cgroup: cg, PodUID: "5c1e3b6a-9d2f-4e8b-a7c4-0f1e2d3c4b5a", ContainerID: "0123abcd", Count: 1, Total: 1})
	waitUntil(t, func() bool { return w.Watched() == 4 })
	if w.Kills() != 5 {
		t.Errorf("Kills() = %d, want 5", w.Kills())
	}
}

func fakeCgroup(t *testing.T, dir string, kills int) {
	t.Helper()
	if err := os.MkdirAll(dir, 0o755); err != nil {
		t.Fatal(err)
	}
	setKills(t, dir, kills)
}

func setKills(t *testing.T, dir string, kills int) {
	t.Helper()
	data := []byte("low 0\nhigh 0\nmax 7\noom 4\noom_kill " + strconv.Itoa(kills) + "\noom_group_kill 0\n")
	if err := os.WriteFile(filepath.Join(dir, eventsLocal), data, 0o644); err != nil {
		t.Fatal(err)
	}
}

func want(t *testing.T, kills <-chan Kill, k Kill) {
	t.Helper()
	select {
	case got := <-kills:
		if got.At.IsZero() {
			t.Errorf("Kill without a time: %+v", got)
		}
		got.At = time.Time{}
		if got != k {
			t.Errorf("got %+v, want %+v", got, k)
		}
	case <-time.After(5 * time.Second):
		t.Fatalf("no Kill within 5 s, want %+v", k)
	}
}

func waitUntil(t *testing.T, cond func() bool) {
	t.Helper()
	for deadline := time.Now().Add(5 * time.Second); !cond(); time.Sleep(5 * time.Millisecond) {
		if time.Now().After(deadline) {
			t.Fatal("condition not met within 5 s")
		}
	}
}
