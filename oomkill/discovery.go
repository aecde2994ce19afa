package oomkill

import (
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"time"
	"unsafe"

	"golang.org/x/sys/unix"
)

// dirMask: a directory's watch sees its cgroup's children come and go,
// and itself removed (IN_IGNORED, always reported).
// A v1 cgroup can be renamed: a move is a removal and a creation.
const dirMask = unix.IN_CREATE | unix.IN_DELETE | unix.IN_MOVED_TO | unix.IN_MOVED_FROM | unix.IN_ONLYDIR

// cgroup is one watched cgroup.
type cgroup struct {
	path string
	dir  int32    // inotify watch of the directory
	file *os.File // the counter's file (memory.oom_control, memory.events.local)
	last uint64   // the counter when last read

	efd    int   // v1: the eventfd the kernel signals; -1 on v2
	events int32 // v2: inotify watch of the counter's file; -1 on v1

	// v1: when to read the counter again after a wake-up, see v1.go.
	woken, recheckAt time.Time
	recheckStep      time.Duration
}

// add watches the cgroup at path, if not yet, and its descendants. fresh
// says the cgroup appeared while Run was running: its counter started at
// zero, and a kill before the watch began is reported. A cgroup already
// watched has its counter read again (after an inotify overflow).
func (l *loop) add(path string, fresh bool) error {
	cg := l.byPath[path]
	if cg == nil {
		wd, err := unix.InotifyAddWatch(l.in, path, dirMask)
		if err != nil {
			return fmt.Errorf("watch the directory: %w", err)
		}
		cg = &cgroup{path: path, dir: int32(wd), efd: -1, events: -1}
		l.byPath[path], l.byWatch[cg.dir] = cg, cg
		l.w.watched.Add(1)
		if err := l.attach(cg); err != nil {
			// The directory stays watched for its children.
			if !gone(err) {
				l.problem(cg, "watch the OOM-kill counter", err)
			}
		} else {
			l.check(cg, fresh)
		}
	} else if cg.file != nil {
		l.check(cg, true)
	}
	entries, err := os.ReadDir(path)
	if err != nil {
		return fmt.Errorf("list the cgroup's children: %w", err)
	}
	for _, e := range entries {
		if e.IsDir() {
			child := filepath.Join(path, e.Name())
			if err := l.add(child, fresh); err != nil && !gone(err) {
				l.problem(&cgroup{path: child}, "watch a cgroup", err)
			}
		}
	}
	return nil
}

// attach starts the version's notification of the counter.
func (l *loop) attach(cg *cgroup) error {
	if l.w.version == V1 {
		return l.attachV1(cg)
	}
	return l.attachV2(cg)
}

// remove stops watching the cgroup at path and its descendants.
func (l *loop) remove(path string) {
	for p, cg := range l.byPath {
		if p == path || strings.HasPrefix(p, path+"/") {
			l.forget(cg)
		}
	}
	if path == l.w.root {
		l.w.log.Warn("the OOM-kill watcher's root cgroup was removed; looking for it again", "root", path)
		l.rootRetry = time.Now().Add(rootRetry)
	}
}

// forget drops cg's state and watches.
func (l *loop) forget(cg *cgroup) {
	unix.InotifyRmWatch(l.in, uint32(cg.dir))
	if cg.events >= 0 {
		unix.InotifyRmWatch(l.in, uint32(cg.events))
	}
	if cg.efd >= 0 {
		unix.EpollCtl(l.ep, unix.EPOLL_CTL_DEL, cg.efd, nil)
		unix.Close(cg.efd)
		delete(l.byFD, cg.efd)
	}
	if cg.file != nil {
		cg.file.Close()
	}
	if l.byWatch[cg.dir] == cg {
		delete(l.byWatch, cg.dir)
	}
	if cg.events >= 0 && l.byWatch[cg.events] == cg {
		delete(l.byWatch, cg.events)
	}
	delete(l.rechecks, cg)
	if l.byPath[cg.path] == cg {
		delete(l.byPath, cg.path)
		l.w.watched.Add(-1)
	}
}

// readInotify handles every event queued.
func (l *loop) readInotify() {
	var buf [16 << 10]byte
	for {
		n, err := unix.Read(l.in, buf[:])
		if err == unix.EINTR {
			continue
		}
		if err != nil || n <= 0 {
			return // EAGAIN: all read
		}
		for off := 0; off+unix.SizeofInotifyEvent <= n; {
			ev := (*unix.InotifyEvent)(unsafe.Pointer(&buf[off]))
			name := buf[off+unix.SizeofInotifyEvent : off+unix.SizeofInotifyEvent+int(ev.Len)]
			off += unix.SizeofInotifyEvent + int(ev.Len)
			l.inotified(ev.Wd, ev.Mask, strings.TrimRight(string(name), "\x00"))
		}
	}
}

func (l *loop) inotified(wd int32, mask uint32, name string) {
	if mask&unix.IN_Q_OVERFLOW != 0 {
		l.w.log.Warn("inotify queue overflowed; scanning the cgroups again", "root", l.w.root)
		l.rescan()
		return
	}
	if wd == l.parent {
		l.rootEvent(mask, name)
		return
	}
	cg := l.byWatch[wd]
	if cg == nil {
		return
	}
	switch {
	case wd == cg.events:
		if mask&unix.IN_MODIFY != 0 {
			l.check(cg, true)
		}
	case mask&(unix.IN_CREATE|unix.IN_MOVED_TO) != 0 && mask&unix.IN_ISDIR != 0:
		child := filepath.Join(cg.path, name)
		if err := l.add(child, true); err != nil && !gone(err) {
			l.problem(&cgroup{path: child}, "watch a new cgroup", err)
		}
	case mask&(unix.IN_DELETE|unix.IN_MOVED_FROM) != 0 && mask&unix.IN_ISDIR != 0:
		l.remove(filepath.Join(cg.path, name))
	case mask&unix.IN_IGNORED != 0:
		l.remove(cg.path)
	}
}

// watchParent watches the root's parent for the root's removal, which the
// root's own watch does not tell while a file in it is open (the file's
// dentry pins its directory's, and the kernel reports the directory's
// removal when the last reference goes), and for its return. Without it,
// the root is looked for every rootRetry.
func (l *loop) watchParent() {
	wd, err := unix.InotifyAddWatch(l.in, filepath.Dir(l.w.root), dirMask)
	if err != nil {
		l.problem(&cgroup{path: filepath.Dir(l.w.root)}, "watch the root's parent", err)
		return
	}
	l.parent = int32(wd)
}

func (l *loop) rootEvent(mask uint32, name string) {
	switch {
	case mask&unix.IN_IGNORED != 0:
		l.parent = -1
	case name != filepath.Base(l.w.root) || mask&unix.IN_ISDIR == 0:
	case mask&(unix.IN_DELETE|unix.IN_MOVED_FROM) != 0:
		l.remove(l.w.root)
	case mask&(unix.IN_CREATE|unix.IN_MOVED_TO) != 0:
		l.rootRetry = time.Now()
		l.due()
	}
}

// rescan drops the cgroups gone and adds those missed, after an overflow.
func (l *loop) rescan() {
	for p := range l.byPath {
		if !exists(p) {
			l.remove(p)
		}
	}
	if err := l.add(l.w.root, true); err != nil && !gone(err) {
		l.problem(&cgroup{path: l.w.root}, "scan the root again", err)
	}
}
