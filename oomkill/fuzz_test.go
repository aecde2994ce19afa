package oomkill

import (
	"strings"
	"testing"
)

// FuzzPodOf: no cgroup path makes PodOf panic, and a pod UID it returns is
// a UID with dashes (the systemd driver's underscores turned).
func FuzzPodOf(f *testing.F) {
	for _, s := range []string{
		"/sys/fs/cgroup/kubepods.slice/kubepods-burstable.slice/kubepods-burstable-pod1b2c3d4e_5f6a_7b8c_9d0e_1f2a3b4c5d6e.slice/cri-containerd-" + strings.Repeat("ab", 32) + ".scope",
		"/sys/fs/cgroup/memory/kubepods/besteffort/pod1b2c3d4e-5f6a-7b8c-9d0e-1f2a3b4c5d6e/" + strings.Repeat("cd", 32),
		"/", "", "pod", "kubepods-pod.slice",
	} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, path string) {
		uid, _ := PodOf(path)
		if uid != "" && (strings.Contains(uid, "_") || !isUID(uid)) {
			t.Fatalf("PodOf(%q) gave pod UID %q", path, uid)
		}
	})
}

// FuzzOOMKills: no content of memory.oom_control or memory.events makes
// the counter's reader panic.
func FuzzOOMKills(f *testing.F) {
	for _, s := range []string{"oom_kill_disable 0\nunder_oom 0\noom_kill 3\n", "low 0\nhigh 0\nmax 2\noom 1\noom_kill 1\noom_group_kill 0\n", "oom_kill x\n", ""} {
		f.Add([]byte(s))
	}
	f.Fuzz(func(t *testing.T, data []byte) { _, _ = oomKills(data) })
}
