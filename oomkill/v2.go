package oomkill

import (
	"fmt"
	"os"
	"path/filepath"

	"golang.org/x/sys/unix"
)

// cgroup v2: memory.events has "oom_kill N", and the kernel generates a
// file-modified event (inotify IN_MODIFY) on it when it changes. Its counts
// are hierarchical (a kill in a container counts in the pod, the QoS class
// and kubepods too), so memory.events.local (kernels since 5.2), with this
// cgroup's own kills, is watched where it exists: one kill, one Kill.
// The kernel notifies after it counts, so no re-read is needed as on v1.

const (
	eventsLocal = "memory.events.local"
	events      = "memory.events"
)

func (l *loop) attachV2(cg *cgroup) error {
	name := eventsLocal
	f, err := os.Open(filepath.Join(cg.path, name))
	if os.IsNotExist(err) {
		name = events
		f, err = os.Open(filepath.Join(cg.path, name))
	}
	if err != nil {
		return fmt.Errorf("open %s: %w", name, err)
	}
	wd, err := unix.InotifyAddWatch(l.in, filepath.Join(cg.path, name), unix.IN_MODIFY)
	if err != nil {
		f.Close()
		return fmt.Errorf("watch %s: %w", name, err)
	}
	cg.file, cg.events = f, int32(wd)
	l.byWatch[cg.events] = cg
	return nil
}
