package drift

import (
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"unsafe"

	"golang.org/x/sys/unix"
)

// dirMask is what a watched directory reports: an entry written, closed
// after writing, chmod'ed or chown'ed, created, deleted or renamed in or
// out, and the directory itself deleted or moved away. IN_ONLYDIR refuses
// a path that is no longer a directory.
const dirMask = unix.IN_MODIFY | unix.IN_CLOSE_WRITE | unix.IN_ATTRIB |
	unix.IN_CREATE | unix.IN_DELETE | unix.IN_MOVED_FROM | unix.IN_MOVED_TO |
	unix.IN_DELETE_SELF | unix.IN_MOVE_SELF | unix.IN_ONLYDIR

// rawEvent is one inotify event as read: the watch, the mask and the name
// of the entry in the watched directory ("" for the directory itself).
type rawEvent struct {
	wd   int32
	mask uint32
	name string
}

// inotify is one inotify instance on Go's poller: Read blocks without a
// thread and close wakes it. Its watch maps are used by Run's goroutine
// only; the reading goroutine sees raw events.
type inotify struct {
	f     *os.File
	fd    int
	byWD  map[int32]string
	byDir map[string]int32
}

func newInotify() (*inotify, error) {
	fd, err := unix.InotifyInit1(unix.IN_CLOEXEC | unix.IN_NONBLOCK)
	if err != nil {
		return nil, fmt.Errorf("drift: create inotify: %w", err)
	}
	return &inotify{f: os.NewFile(uintptr(fd), "inotify"), fd: fd,
		byWD: map[int32]string{}, byDir: map[string]int32{}}, nil
}

func (in *inotify) close() error { return in.f.Close() }

// watch makes dirs exactly the watched set. Every dir is added again, so
// that a directory deleted and created anew (a new inode) gets a new watch;
// adding one already watched returns its watch. Watches of directories no
// longer wanted are removed. A directory that vanished since it was listed
// is skipped: the event of its removal brings a new arm.
func (in *inotify) watch(dirs []string) error {
	byWD := make(map[int32]string, len(dirs))
	byDir := make(map[string]int32, len(dirs))
	for _, d := range dirs {
		wd, err := unix.InotifyAddWatch(in.fd, d, dirMask)
		if errors.Is(err, unix.ENOENT) || errors.Is(err, unix.ENOTDIR) {
			continue
		}
		if err != nil {
			return fmt.Errorf("drift: watch %s: %w", d, err)
		}
		byWD[int32(wd)], byDir[d] = d, int32(wd)
	}
	for wd := range in.byWD {
		if _, ok := byWD[wd]; !ok {
			unix.InotifyRmWatch(in.fd, uint32(wd)) // EINVAL when the kernel dropped it already
		}
	}
	in.byWD, in.byDir = byWD, byDir
	return nil
}

// path is the full path an event names, or "" for a watch no longer known.
func (in *inotify) path(ev rawEvent) string {
	dir, ok := in.byWD[ev.wd]
	if !ok {
		return ""
	}
	if ev.name == "" {
		return dir
	}
	return filepath.Join(dir, ev.name)
}

// readEvents blocks for the next batch of events; it fails once the
// instance is closed.
func (in *inotify) readEvents(buf []byte) ([]rawEvent, error) {
	n, err := in.f.Read(buf)
	if err != nil {
		return nil, err
	}
	var out []rawEvent
	for off := 0; off+unix.SizeofInotifyEvent <= n; {
		ev := (*unix.InotifyEvent)(unsafe.Pointer(&buf[off]))
		start := off + unix.SizeofInotifyEvent
		end := min(start+int(ev.Len), n)
		off = start + int(ev.Len)
		name := buf[start:end]
		for len(name) > 0 && name[len(name)-1] == 0 {
			name = name[:len(name)-1] // NUL padding
		}
		out = append(out, rawEvent{wd: ev.Wd, mask: ev.Mask, name: string(name)})
	}
	return out, nil
}
