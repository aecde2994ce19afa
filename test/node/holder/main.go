// Command holder holds test/node's mount namespace and reaps it. It runs as
// the namespace's first process (exec'd by the script that made the mounts)
// and waits for SIGTERM, which the test sends at the end or the kernel sends
// when the test binary dies (Pdeathsig), after a panic or a timeout too.
// Then it kills every other process of its mount namespace (containerd, the
// kubelet, containerd's shims, which no parent reaps) and every process in
// the node's cgroups (the containers), removes those cgroups and exits; the
// namespace and its mounts go with it.
package main

import (
	"flag"
	"fmt"
	"os"
	"os/signal"
	"path/filepath"
	"sort"
	"strconv"
	"strings"
	"syscall"
	"time"
)

func main() {
	cgroupRoot := flag.String("cgroup-root", "", "the node's cgroup root, relative to each hierarchy (e.g. /nodeward-node-1)")
	hostNS := flag.String("host-ns", "", "the mount namespace the holder must not be in (its starter's, as /proc/self/ns/mnt reads)")
	flag.Parse()
	sig := make(chan os.Signal, 1)
	signal.Notify(sig, syscall.SIGTERM, syscall.SIGINT)
	<-sig
	if err := reap(*cgroupRoot, *hostNS, time.Now().Add(20*time.Second)); err != nil {
		fmt.Fprintln(os.Stderr, "holder:", err)
		os.Exit(1)
	}
}

// reap kills until nothing is left or the deadline passes, then removes the
// cgroups, deepest first.
func reap(cgroupRoot, hostNS string, deadline time.Time) error {
	self := os.Getpid()
	ns, err := os.Readlink("/proc/self/ns/mnt")
	if err != nil {
		return fmt.Errorf("read own mount namespace: %w", err)
	}
	// Never sweep the machine's own namespace: a holder started without
	// its private namespace (or not told which is the host's) reaps only the
	// cgroups.
	if hostNS == "" || hostNS == ns {
		ns = ""
	}
	tick := time.NewTicker(100 * time.Millisecond)
	defer tick.Stop()
	for {
		pids := cgroupPids(cgroupRoot)
		for _, pid := range namespacePids(ns) {
			if pid != self {
				pids = append(pids, pid)
			}
		}
		if len(pids) == 0 {
			break
		}
		for _, pid := range pids {
			_ = syscall.Kill(pid, syscall.SIGKILL)
		}
		if time.Now().After(deadline) {
			return fmt.Errorf("processes left after the deadline: %v", pids)
		}
		<-tick.C
	}
	var dirs []string
	for _, h := range hierarchies(cgroupRoot) {
		_ = filepath.WalkDir(h, func(path string, d os.DirEntry, err error) error {
			if err == nil && d.IsDir() {
				dirs = append(dirs, path)
			}
			return nil
		})
	}
	sort.Slice(dirs, func(i, j int) bool { return len(dirs[i]) > len(dirs[j]) })
	for _, d := range dirs {
		for os.Remove(d) != nil && time.Now().Before(deadline) {
			<-tick.C
		}
	}
	return nil
}

// hierarchies are the node's cgroup root in every mounted hierarchy (cgroup
// v1: one per controller) or the unified one.
func hierarchies(cgroupRoot string) []string {
	if cgroupRoot == "" {
		return nil
	}
	var out []string
	if _, err := os.Stat(filepath.Join("/sys/fs/cgroup", cgroupRoot)); err == nil {
		out = append(out, filepath.Join("/sys/fs/cgroup", cgroupRoot))
	}
	matches, _ := filepath.Glob(filepath.Join("/sys/fs/cgroup", "*", cgroupRoot))
	return append(out, matches...)
}

func cgroupPids(cgroupRoot string) []int {
	var pids []int
	for _, h := range hierarchies(cgroupRoot) {
		_ = filepath.WalkDir(h, func(path string, d os.DirEntry, err error) error {
			if err != nil || d.Name() != "cgroup.procs" {
				return nil
			}
			data, _ := os.ReadFile(path)
			for _, f := range strings.Fields(string(data)) {
				if pid, err := strconv.Atoi(f); err == nil {
					pids = append(pids, pid)
				}
			}
			return nil
		})
	}
	return pids
}

func namespacePids(ns string) []int {
	if ns == "" {
		return nil
	}
	entries, _ := os.ReadDir("/proc")
	var pids []int
	for _, e := range entries {
		pid, err := strconv.Atoi(e.Name())
		if err != nil {
			continue
		}
		if link, err := os.Readlink(filepath.Join("/proc", e.Name(), "ns", "mnt")); err == nil && link == ns {
			pids = append(pids, pid)
		}
	}
	return pids
}
