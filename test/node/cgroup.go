package node

import (
	"fmt"
	"os"
	"path/filepath"
)

// cgroupHierarchies are the mounted cgroup hierarchies: one per controller
// on cgroup v1 (where the kubelet needs its cgroupRoot in every one), or
// the unified one.
func cgroupHierarchies() ([]string, error) {
	if _, err := os.Stat("/sys/fs/cgroup/cgroup.controllers"); err == nil {
		return []string{"/sys/fs/cgroup"}, nil
	}
	procs, err := filepath.Glob("/sys/fs/cgroup/*/cgroup.procs")
	if err != nil || len(procs) == 0 {
		return nil, fmt.Errorf("no cgroup hierarchy under /sys/fs/cgroup")
	}
	var out []string
	for _, p := range procs {
		out = append(out, filepath.Dir(p))
	}
	return out, nil
}

// createCgroupRoot makes root in every hierarchy; cpuset's needs its CPUs
// and memory nodes copied from the parent before a process may join.
func createCgroupRoot(root string) error {
	hs, err := cgroupHierarchies()
	if err != nil {
		return err
	}
	for _, h := range hs {
		dir := filepath.Join(h, root)
		if err := os.MkdirAll(dir, 0o755); err != nil {
			return fmt.Errorf("create cgroup %s: %w", dir, err)
		}
		for _, f := range []string{"cpuset.cpus", "cpuset.mems"} {
			if v, err := os.ReadFile(filepath.Join(h, f)); err == nil {
				if err := os.WriteFile(filepath.Join(dir, f), v, 0o644); err != nil {
					return fmt.Errorf("set %s of %s: %w", f, dir, err)
				}
			}
		}
	}
	return nil
}

// removeCgroupRoot removes what the holder left (it removes the cgroups
// itself once their processes are gone); errors are ignored, it is cleanup.
func removeCgroupRoot(root string) {
	hs, _ := cgroupHierarchies()
	for _, h := range hs {
		_ = os.Remove(filepath.Join(h, root))
	}
}
