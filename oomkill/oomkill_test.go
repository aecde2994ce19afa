package oomkill_test

import (
	"flag"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/nodeward/nodeward/oomkill"
)

const (
	podUID      = "5c1e3b6a-9d2f-4e8b-a7c4-0f1e2d3c4b5a"
	containerID = "0123456789abcdef0123456789abcdef0123456789abcdef0123456789abcdef"
	otherID     = "fedcba9876543210fedcba9876543210fedcba9876543210fedcba9876543210"
	hogLimit    = 16 << 20
)

var killCount = flag.Int("oomkill.kills", 5, "OOM kills TestRealOOMKill makes and measures")

// cgroupfsPod is the cgroupfs driver's shape, under root "kubepods".
const cgroupfsPod = "burstable/pod" + podUID

// systemdPod is the systemd driver's, under root "kubepods.slice".
func systemdPod(uid string) string {
	return "kubepods-besteffort.slice/kubepods-besteffort-pod" + strings.ReplaceAll(uid, "-", "_") + ".slice"
}

// A real OOM kill of a process in a container's cgroup (cgroupfs driver's
// shape) is a Kill of that cgroup, with its pod and container, one per
// kill; kill → Kill latency measured against the kernel log's timestamp.
func TestRealOOMKill(t *testing.T) {
	h := newHierarchy(t)
	root := h.mkdir(t, h.base, "kubepods")
	cg := h.mkdir(t, root, cgroupfsPod+"/"+containerID)
	h.limit(t, cg, hogLimit)
	klog := openKernelLog(t)
	w, kills := watch(t, oomkill.Options{Root: root, Now: sinceBoot})
	if w.Version() != h.version {
		t.Errorf("Version() = %v, want %v", w.Version(), h.version)
	}
	waitFor(t, "4 cgroups watched", func() bool { return w.Watched() == 4 })

	n := *killCount
	var latencies []time.Duration
	for i := 1; i <= n; i++ {
		pid, wait := startHog(t, cg)
		wait()
		k := next(t, kills)
		if k.Cgroup != cg || k.PodUID != podUID || k.ContainerID != containerID || k.Count != 1 || k.Total != uint64(i) {
			t.Fatalf("kill %d: got %+v, want cgroup %s, pod %s, container %s, count 1, total %d", i, k, cg, podUID, containerID, i)
		}
		if klog != nil {
			if at, ok := klog.killed(pid); ok {
				latencies = append(latencies, k.At.Sub(at))
			} else {
				t.Logf("kill %d: the kernel's record of the kill of %d not found", i, pid)
			}
		}
	}
	if got := w.Kills(); got != uint64(n) {
		t.Errorf("Kills() = %d, want %d", got, n)
	}
	select {
	case k := <-kills:
		t.Errorf("a Kill too many: %+v", k)
	case <-time.After(200 * time.Millisecond):
	}
	if len(latencies) > 0 {
		slices.Sort(latencies)
		q := func(p int) time.Duration { return latencies[(len(latencies)-1)*p/100] }
		t.Logf("%s kill → Kill latency over %d kills: min %v, p50 %v, p90 %v, p99 %v, max %v",
			h.version, len(latencies), q(0), q(50), q(90), q(99), q(100))
		if max := latencies[len(latencies)-1]; max > time.Second {
			t.Errorf("a Kill came %v after the kill", max)
		}
	}
}

// A pod created after the watcher started (systemd driver's shape, UID
// with underscores) is watched: a kill in it at once is reported, from a
// counter of zero, even if it came before the watch.
func TestCgroupCreatedLater(t *testing.T) {
	h := newHierarchy(t)
	root := h.mkdir(t, h.base, "kubepods.slice")
	w, kills := watch(t, oomkill.Options{Root: root})
	waitFor(t, "the root watched", func() bool { return w.Watched() == 1 })

	cg := h.mkdir(t, root, systemdPod(podUID)+"/cri-containerd-"+containerID+".scope")
	h.limit(t, cg, hogLimit)
	_, wait := startHog(t, cg)
	wait()
	k := next(t, kills)
	if k.Cgroup != cg || k.PodUID != podUID || k.ContainerID != containerID || k.Count != 1 || k.Total != 1 {
		t.Fatalf("got %+v, want cgroup %s, pod %s, container %s, count 1", k, cg, podUID, containerID)
	}
	if w.Watched() != 4 {
		t.Errorf("Watched() = %d, want 4", w.Watched())
	}
}

// Two processes killed in one cgroup count as two, in one Kill or two.
func TestTwoKillsCountTwo(t *testing.T) {
	h := newHierarchy(t)
	root := h.mkdir(t, h.base, "kubepods")
	cg := h.mkdir(t, root, cgroupfsPod+"/"+containerID)
	h.limit(t, cg, hogLimit)
	w, kills := watch(t, oomkill.Options{Root: root})
	waitFor(t, "4 cgroups watched", func() bool { return w.Watched() == 4 })

	_, wait1 := startHog(t, cg)
	_, wait2 := startHog(t, cg)
	wait1()
	wait2()
	var counts []uint64
	var total uint64
	for total < 2 {
		k := next(t, kills)
		if k.Cgroup != cg {
			t.Fatalf("Kill of %s, want %s", k.Cgroup, cg)
		}
		counts = append(counts, k.Count)
		total += k.Count
	}
	if total != 2 || w.Kills() != 2 {
		t.Fatalf("counts %v (Kills() %d), want 2 in all", counts, w.Kills())
	}
	t.Logf("two kills came as Kills with counts %v", counts)
}

// A cgroup removed (and one made again at the same path) does not break
// the watcher: the others' kills, and the new one's, are still reported.
func TestCgroupRemoved(t *testing.T) {
	h := newHierarchy(t)
	root := h.mkdir(t, h.base, "kubepods")
	pod := h.mkdir(t, root, cgroupfsPod)
	gone := h.mkdir(t, pod, otherID)
	cg := h.mkdir(t, pod, containerID)
	h.limit(t, cg, hogLimit)
	w, kills := watch(t, oomkill.Options{Root: root})
	waitFor(t, "5 cgroups watched", func() bool { return w.Watched() == 5 })

	if err := os.Remove(gone); err != nil {
		t.Fatal(err)
	}
	waitFor(t, "the removed cgroup dropped", func() bool { return w.Watched() == 4 })
	_, wait := startHog(t, cg)
	wait()
	if k := next(t, kills); k.Cgroup != cg || k.Count != 1 {
		t.Fatalf("got %+v, want a kill in %s", k, cg)
	}

	// The same path again: a new cgroup, its counter from zero.
	if err := os.Mkdir(gone, 0o755); err != nil {
		t.Fatal(err)
	}
	h.limit(t, gone, hogLimit)
	_, wait = startHog(t, gone)
	wait()
	if k := next(t, kills); k.Cgroup != gone || k.Count != 1 || k.Total != 1 {
		t.Fatalf("got %+v, want the first kill in the new %s", k, gone)
	}
	if w.Watched() != 5 {
		t.Errorf("Watched() = %d, want 5", w.Watched())
	}
}

// New says which cgroup version, and what is missing, in its errors.
func TestNewErrors(t *testing.T) {
	cases := []struct{ root, want string }{
		{t.TempDir(), "is not a cgroup"},
		{filepath.Join(t.TempDir(), "absent"), "statfs the root"},
	}
	if exists("/sys/fs/cgroup/cpu/cgroup.procs") && !exists("/sys/fs/cgroup/cpu/memory.oom_control") {
		cases = append(cases, struct{ root, want string }{"/sys/fs/cgroup/cpu", "cgroup v1 hierarchy other than memory"})
	}
	for _, dir := range []string{"/sys/fs/cgroup/unified", "/sys/fs/cgroup"} {
		if exists(dir+"/cgroup.controllers") && !v2Memory(dir) {
			cases = append(cases, struct{ root, want string }{dir, "cgroup v2 without the memory controller"})
		}
	}
	for _, tc := range cases {
		_, err := oomkill.New(oomkill.Options{Root: tc.root})
		if err == nil || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("New(%s) = %v, want an error with %q", tc.root, err, tc.want)
		}
	}
}

// A pod over its limit: the kernel kills a process of one of its
// containers, and the Kill names that container's cgroup, once, although
// on v2 the pod (and kubepods) count the kill too.
func TestPodLimitKillNamesContainer(t *testing.T) {
	podLimitKill(t, newHierarchy(t))
}

func podLimitKill(t *testing.T, h *hierarchy) {
	root := h.mkdir(t, h.base, "kubepods")
	pod := h.mkdir(t, root, cgroupfsPod)
	cg := h.mkdir(t, pod, containerID)
	h.mkdir(t, pod, otherID)
	h.limit(t, pod, hogLimit)
	w, kills := watch(t, oomkill.Options{Root: root})
	waitFor(t, "5 cgroups watched", func() bool { return w.Watched() == 5 })

	_, wait := startHog(t, cg)
	wait()
	if k := next(t, kills); k.Cgroup != cg || k.ContainerID != containerID || k.Count != 1 {
		t.Fatalf("got %+v, want one kill in %s", k, cg)
	}
	select {
	case k := <-kills:
		t.Errorf("a second Kill for one kill: %+v", k)
	case <-time.After(300 * time.Millisecond):
	}
	if h.version == oomkill.V2 {
		data, err := os.ReadFile(filepath.Join(pod, "memory.events"))
		if err != nil || !strings.Contains(string(data), "oom_kill 1") {
			t.Errorf("the pod's memory.events (%v) does not count the kill: %q", err, data)
		}
	}
}

// The root removed (the kubelet's cgroups torn down) and made again: the
// watcher drops everything and watches the new tree.
func TestRootRemovedAndBack(t *testing.T) {
	h := newHierarchy(t)
	root := h.mkdir(t, h.base, "kubepods")
	cg := h.mkdir(t, root, cgroupfsPod+"/"+containerID)
	w, kills := watch(t, oomkill.Options{Root: root})
	waitFor(t, "4 cgroups watched", func() bool { return w.Watched() == 4 })

	for dir := cg; dir != h.base; dir = filepath.Dir(dir) {
		if err := os.Remove(dir); err != nil {
			t.Fatal(err)
		}
	}
	waitFor(t, "no cgroup watched", func() bool { return w.Watched() == 0 })
	cg = h.mkdir(t, h.base, "kubepods/"+cgroupfsPod+"/"+containerID)
	h.limit(t, cg, hogLimit)
	_, wait := startHog(t, cg)
	wait()
	if k := next(t, kills); k.Cgroup != cg || k.Count != 1 || k.Total != 1 {
		t.Fatalf("got %+v, want the first kill in %s", k, cg)
	}
	if w.Watched() != 4 {
		t.Errorf("Watched() = %d, want 4", w.Watched())
	}
}

// On v1 a kill that signals no eventfd (one by the global OOM killer) is
// found by the node's count of OOM kills in /proc/vmstat, within a second
// or so. The watcher here registers no eventfds; the kill is a cgroup's.
func TestV1KillWithoutEventfd(t *testing.T) {
	h := newHierarchy(t)
	if h.version != oomkill.V1 {
		t.Skip("cgroup v1 only: on v2 every change of a counter is notified")
	}
	root := h.mkdir(t, h.base, "kubepods")
	cg := h.mkdir(t, root, cgroupfsPod+"/"+containerID)
	h.limit(t, cg, hogLimit)
	w, err := oomkill.NewWithoutEventfds(oomkill.Options{Root: root})
	if err != nil {
		t.Fatal(err)
	}
	w, kills := run(t, w)
	waitFor(t, "4 cgroups watched", func() bool { return w.Watched() == 4 })

	_, wait := startHog(t, cg)
	wait()
	killed := time.Now()
	k := next(t, kills)
	if k.Cgroup != cg || k.Count != 1 {
		t.Fatalf("got %+v, want one kill in %s", k, cg)
	}
	if d := time.Since(killed); d > 2*time.Second {
		t.Errorf("the Kill came %v after the kill", d)
	} else {
		t.Logf("found %v after the hog's end, without eventfd", d)
	}
}
