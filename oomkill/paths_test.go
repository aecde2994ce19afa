package oomkill_test

import (
	"slices"
	"testing"

	"github.com/nodeward/nodeward/oomkill"
)

func TestPodOf(t *testing.T) {
	const (
		uid = "0a1b2c3d-4e5f-6789-abcd-ef0123456789"
		us  = "0a1b2c3d_4e5f_6789_abcd_ef0123456789"
		cid = "3f4e5d6c7b8a99887766554433221100ffeeddccbbaa00112233445566778899"
	)
	for _, tc := range []struct{ path, pod, container string }{
		// systemd driver, v2 and v1, each QoS class.
		{"/sys/fs/cgroup/kubepods.slice/kubepods-burstable.slice/kubepods-burstable-pod" + us + ".slice/cri-containerd-" + cid + ".scope", uid, cid},
		{"/sys/fs/cgroup/memory/kubepods.slice/kubepods-besteffort.slice/kubepods-besteffort-pod" + us + ".slice/crio-" + cid + ".scope", uid, cid},
		{"kubepods.slice/kubepods-pod" + us + ".slice/docker-" + cid + ".scope", uid, cid},
		{"kubepods.slice/kubepods-burstable.slice/kubepods-burstable-pod" + us + ".slice", uid, ""},
		{"kubepods.slice/kubepods-burstable.slice/kubepods-burstable-pod" + us + ".slice/crio-conmon-" + cid + ".scope", uid, ""},
		{"kubepods.slice/kubepods-burstable.slice", "", ""},
		{"kubepods.slice", "", ""},
		// cgroupfs driver.
		{"/sys/fs/cgroup/memory/kubepods/burstable/pod" + uid + "/" + cid, uid, cid},
		{"/sys/fs/cgroup/kubepods/pod" + uid + "/" + cid + "/", uid, cid},
		{"kubepods/besteffort/pod" + uid, uid, ""},
		{"kubepods/besteffort", "", ""},
		// A static pod's UID is a hash without dashes.
		{"kubepods/burstable/pod6b1d7a58b4a4c1b8f0c8e6b1d7a58b4a/" + cid, "6b1d7a58b4a4c1b8f0c8e6b1d7a58b4a", cid},
		// Not pods.
		{"/sys/fs/cgroup/system.slice/podman.service", "", ""},
		{"/sys/fs/cgroup/kubepods/podnotauid/" + cid, "", ""},
		{"/sys/fs/cgroup/user.slice/user-pod1000.slice", "", ""},
		{"", "", ""},
	} {
		pod, container := oomkill.PodOf(tc.path)
		if pod != tc.pod || container != tc.container {
			t.Errorf("PodOf(%q) = %q, %q; want %q, %q", tc.path, pod, container, tc.pod, tc.container)
		}
	}
}

// TestDefaultRootsUnder: the kubepods cgroups of both drivers, v2 then v1,
// under a cgroup filesystem mounted elsewhere (the DaemonSet's
// /host/sys/fs/cgroup); DefaultRoots are those of /sys/fs/cgroup.
func TestDefaultRootsUnder(t *testing.T) {
	got := oomkill.DefaultRootsUnder("/host/sys/fs/cgroup")
	want := []string{"/host/sys/fs/cgroup/kubepods.slice", "/host/sys/fs/cgroup/kubepods",
		"/host/sys/fs/cgroup/memory/kubepods.slice", "/host/sys/fs/cgroup/memory/kubepods"}
	if !slices.Equal(got, want) {
		t.Errorf("DefaultRootsUnder(/host/sys/fs/cgroup) = %q, want %q", got, want)
	}
	if got, want := oomkill.DefaultRoots(), oomkill.DefaultRootsUnder("/sys/fs/cgroup"); !slices.Equal(got, want) || got[0] != "/sys/fs/cgroup/kubepods.slice" {
		t.Errorf("DefaultRoots() = %q, want %q", got, want)
	}
}
