package oomkill

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"os"
	"path"
	"sync/atomic"
	"time"

	"golang.org/x/sys/unix"
)

// Kill is one increase of a cgroup's OOM-kill counter: the kernel killed
// Count processes in the cgroup since the last Kill of it.
type Kill struct {
	// Cgroup is the cgroup's directory, as found under the root.
	Cgroup string
	// PodUID and ContainerID are what PodOf makes of Cgroup; empty for a
	// cgroup above the pod (or the container).
	PodUID, ContainerID string
	// Count is the increase (more than one when kills came close
	// together), Total the cgroup's counter after it.
	Count, Total uint64
	// At is when the watcher read the increase (Options.Now).
	At time.Time
}

// Version is the cgroup version of the root.
type Version int

// The cgroup versions.
const (
	V1 Version = 1
	V2 Version = 2
)

// DefaultRoots are tried in order when Options.Root is empty: the kubepods
// cgroup of the systemd and the cgroupfs driver, on v2 and on v1.
func DefaultRoots() []string { return DefaultRootsUnder("/sys/fs/cgroup") }

// DefaultRootsUnder are DefaultRoots in the cgroup filesystem mounted at
// cgroupFS: a pod reads the host's at another path (the DaemonSet mounts it
// at /host/sys/fs/cgroup), its own /sys/fs/cgroup being its container's.
func DefaultRootsUnder(cgroupFS string) []string {
	return []string{
		path.Join(cgroupFS, "kubepods.slice"),
		path.Join(cgroupFS, "kubepods"),
		path.Join(cgroupFS, "memory", "kubepods.slice"),
		path.Join(cgroupFS, "memory", "kubepods"),
	}
}

// Options configure a Watcher.
type Options struct {
	// Root is the cgroup directory whose descendants (and itself) are
	// watched; the first of DefaultRoots that exists when empty.
	Root string
	// Now stamps Kills; time.Now when nil.
	Now func() time.Time
	// Log gets the problems of single cgroups (which never stop the
	// watcher); discarded when nil.
	Log *slog.Logger
}

// Watcher reports OOM kills in the cgroups under a root. Its state belongs
// to Run, which runs once at a time; Kills, Watched, Root and Version are
// safe for concurrent use.
type Watcher struct {
	root    string
	version Version
	now     func() time.Time
	log     *slog.Logger

	// noEventfds: a test's v1 watcher without its eventfds, that only the
	// node's count finds kills (export_test.go).
	noEventfds bool

	running atomic.Bool
	kills   atomic.Uint64
	watched atomic.Int64
}

// New checks the root: a cgroup v2 directory with the memory controller,
// or a directory of a v1 memory hierarchy.
func New(opts Options) (*Watcher, error) {
	root := opts.Root
	if root == "" {
		for _, r := range DefaultRoots() {
			if _, err := os.Stat(r); err == nil {
				root = r
				break
			}
		}
		if root == "" {
			return nil, fmt.Errorf("oomkill: no kubepods cgroup (tried %v)", DefaultRoots())
		}
	}
	v, err := detect(root)
	if err != nil {
		return nil, err
	}
	return newWatcher(opts, root, v), nil
}

func newWatcher(opts Options, root string, v Version) *Watcher {
	w := &Watcher{root: root, version: v, now: opts.Now, log: opts.Log}
	if w.now == nil {
		w.now = time.Now
	}
	if w.log == nil {
		w.log = slog.New(slog.DiscardHandler)
	}
	return w
}

// detect tells the cgroup version at root by its filesystem, and that the
// memory controller is there.
func detect(root string) (Version, error) {
	var fs unix.Statfs_t
	if err := unix.Statfs(root, &fs); err != nil {
		return 0, fmt.Errorf("oomkill: statfs the root %s: %w", root, err)
	}
	switch fs.Type {
	case unix.CGROUP2_SUPER_MAGIC:
		if !exists(root+"/memory.events") && !exists(root+"/memory.events.local") {
			return 0, fmt.Errorf("oomkill: root %s is cgroup v2 without the memory controller (no memory.events)", root)
		}
		return V2, nil
	case unix.CGROUP_SUPER_MAGIC:
		if !exists(root + "/" + oomControl) {
			return 0, fmt.Errorf("oomkill: root %s is a cgroup v1 hierarchy other than memory (no %s)", root, oomControl)
		}
		return V1, nil
	}
	return 0, fmt.Errorf("oomkill: root %s is not a cgroup (filesystem magic %#x)", root, fs.Type)
}

func exists(path string) bool {
	_, err := os.Stat(path)
	return err == nil
}

// Root is the directory watched.
func (w *Watcher) Root() string { return w.root }

// Version is the cgroup version of the root.
func (w *Watcher) Version() Version { return w.version }

// Kills is the number of OOM kills reported since New.
func (w *Watcher) Kills() uint64 { return w.kills.Load() }

// Watched is the number of cgroups Run watches now.
func (w *Watcher) Watched() int { return int(w.watched.Load()) }

// Run watches until ctx ends (then it returns nil) and sends a Kill for
// each increase of a cgroup's OOM-kill counter, blocking until kills takes
// it. Cgroups created under the root while it runs are watched as they
// appear, with their counter from zero; those there at the start from the
// value they have then. It returns an error only when it cannot start
// (the root unreadable): a cgroup that vanishes or fails is logged and
// dropped. A root that vanishes is watched again when it comes back.
func (w *Watcher) Run(ctx context.Context, kills chan<- Kill) error {
	if !w.running.CompareAndSwap(false, true) {
		return errors.New("oomkill: Run is already running")
	}
	defer w.running.Store(false)
	l, err := w.open(ctx, kills)
	if err != nil {
		return err
	}
	defer l.close()
	if err := l.add(w.root, false); err != nil {
		return fmt.Errorf("oomkill: watch the %s root %s: %w", w.version, w.root, err)
	}
	l.watchParent()
	if w.version == V1 {
		l.globalFirst = true
		l.global(time.Now())
	}

	quit, done := make(chan struct{}), make(chan struct{})
	go func() {
		defer close(done)
		select {
		case <-ctx.Done():
			unix.Write(l.wake, []byte{1, 0, 0, 0, 0, 0, 0, 0})
		case <-quit:
		}
	}()
	defer func() { close(quit); <-done }()

	events := make([]unix.EpollEvent, 64)
	for ctx.Err() == nil {
		if err := l.arm(); err != nil {
			return err
		}
		n, err := unix.EpollWait(l.ep, events, -1)
		if err != nil && err != unix.EINTR {
			return fmt.Errorf("oomkill: wait for events: %w", err)
		}
		for _, ev := range events[:max(n, 0)] {
			switch int(ev.Fd) {
			case l.wake:
				return nil
			case l.in:
				l.readInotify()
			case l.timer:
				l.due()
			default:
				l.woken(int(ev.Fd))
			}
		}
	}
	return nil
}

func (v Version) String() string { return fmt.Sprintf("cgroup v%d", int(v)) }
