package oomkill

import (
	"context"
	"fmt"
	"time"

	"golang.org/x/sys/unix"
)

// rootRetry is how often a vanished root is looked for.
const rootRetry = time.Second

// loop is the state of one Run, owned by its goroutine.
type loop struct {
	w     *Watcher
	ctx   context.Context
	kills chan<- Kill

	ep, in, wake int
	timer        int // timerfd, finer than epoll's milliseconds
	byPath       map[string]*cgroup
	byWatch      map[int32]*cgroup // directory and v2 counter watches
	byFD         map[int]*cgroup   // v1 eventfds
	rechecks     map[*cgroup]struct{}
	rootRetry    time.Time // when to look for the root again; zero while watched
	parent       int32     // inotify watch of the root's parent; -1 if none

	// v1: the node's count of OOM kills, when to read it next (zero:
	// never), and whether it was read yet; see v1.go.
	globalKills uint64
	globalAt    time.Time
	globalFirst bool
}

func (w *Watcher) open(ctx context.Context, kills chan<- Kill) (*loop, error) {
	l := &loop{w: w, ctx: ctx, kills: kills, ep: -1, in: -1, wake: -1, timer: -1, parent: -1,
		byPath: map[string]*cgroup{}, byWatch: map[int32]*cgroup{},
		byFD: map[int]*cgroup{}, rechecks: map[*cgroup]struct{}{}}
	var err error
	if l.ep, err = unix.EpollCreate1(unix.EPOLL_CLOEXEC); err != nil {
		return nil, fmt.Errorf("oomkill: create epoll: %w", err)
	}
	if l.in, err = unix.InotifyInit1(unix.IN_CLOEXEC | unix.IN_NONBLOCK); err != nil {
		l.close()
		return nil, fmt.Errorf("oomkill: create inotify: %w", err)
	}
	if l.wake, err = unix.Eventfd(0, unix.EFD_CLOEXEC|unix.EFD_NONBLOCK); err != nil {
		l.close()
		return nil, fmt.Errorf("oomkill: create eventfd: %w", err)
	}
	if l.timer, err = unix.TimerfdCreate(unix.CLOCK_MONOTONIC, unix.TFD_CLOEXEC|unix.TFD_NONBLOCK); err != nil {
		l.close()
		return nil, fmt.Errorf("oomkill: create timerfd: %w", err)
	}
	for _, fd := range []int{l.in, l.wake, l.timer} {
		if err := l.poll(fd); err != nil {
			l.close()
			return nil, err
		}
	}
	return l, nil
}

func (l *loop) poll(fd int) error {
	ev := unix.EpollEvent{Events: unix.EPOLLIN, Fd: int32(fd)}
	if err := unix.EpollCtl(l.ep, unix.EPOLL_CTL_ADD, fd, &ev); err != nil {
		return fmt.Errorf("oomkill: epoll fd %d: %w", fd, err)
	}
	return nil
}

func (l *loop) close() {
	for _, cg := range l.byPath {
		l.forget(cg)
	}
	for _, fd := range []int{l.timer, l.wake, l.in, l.ep} {
		if fd >= 0 {
			unix.Close(fd)
		}
	}
}

// arm sets the timer for the next v1 re-read, vmstat reading or root
// retry, or disarms it.
func (l *loop) arm() error {
	var next time.Time
	if !l.rootRetry.IsZero() {
		next = l.rootRetry
	}
	for cg := range l.rechecks {
		if next.IsZero() || cg.recheckAt.Before(next) {
			next = cg.recheckAt
		}
	}
	if !l.globalAt.IsZero() && (next.IsZero() || l.globalAt.Before(next)) {
		next = l.globalAt
	}
	var spec unix.ItimerSpec // zero disarms
	if !next.IsZero() {
		spec.Value = unix.NsecToTimespec(max(int64(time.Until(next)), 1))
	}
	if err := unix.TimerfdSettime(l.timer, 0, &spec, nil); err != nil {
		return fmt.Errorf("oomkill: set the timer: %w", err)
	}
	return nil
}

// due does what the timer was set for.
func (l *loop) due() {
	var buf [8]byte
	unix.Read(l.timer, buf[:])
	now := time.Now()
	if !l.rootRetry.IsZero() && !now.Before(l.rootRetry) {
		l.rootRetry = time.Time{}
		if l.byPath[l.w.root] == nil {
			if err := l.add(l.w.root, true); err != nil {
				l.rootRetry = now.Add(rootRetry)
			} else {
				l.w.log.Info("the OOM-kill watcher's root cgroup is back", "root", l.w.root)
			}
		}
	}
	l.recheck(now)
	if !l.globalAt.IsZero() {
		l.global(now)
	}
}
