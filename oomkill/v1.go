package oomkill

import (
	"fmt"
	"os"
	"path/filepath"
	"time"

	"golang.org/x/sys/unix"
)

// cgroup v1: memory.oom_control has "oom_kill N" (kernels since 4.13),
// the kills of processes in this cgroup only (v1 does not count a
// descendant's). An eventfd registered with cgroup.event_control is
// signalled when the cgroup, or an ancestor it is under, runs out of memory
// (and when the cgroup is removed).
//
// The kernel signals before it picks and kills the victim (1 to 6 ms
// before, measured here), so the counter read at the wake-up has often not
// risen yet: it is read again every 250 µs for 10 ms after the wake-up,
// then 0.5, 1, 2, ... ms apart, for a second. (under_oom in
// memory.oom_control is no guide: it reads 0 at the wake-up already.)
//
// A kill by the global OOM killer (the node, not a cgroup, out of memory)
// counts in the victim's cgroup too, but signals no eventfd: the global
// count of OOM kills in /proc/vmstat is read every second, and when it
// rises every cgroup's counter is read.

const (
	oomControl   = "memory.oom_control"
	eventControl = "cgroup.event_control"

	recheckFast    = 250 * time.Microsecond
	recheckFastFor = 10 * time.Millisecond
	recheckFor     = time.Second

	vmstat      = "/proc/vmstat"
	globalEvery = time.Second
)

func (l *loop) attachV1(cg *cgroup) error {
	f, err := os.Open(filepath.Join(cg.path, oomControl))
	if err != nil {
		return fmt.Errorf("open %s: %w", oomControl, err)
	}
	if l.w.noEventfds {
		cg.file = f
		return nil
	}
	efd, err := unix.Eventfd(0, unix.EFD_CLOEXEC|unix.EFD_NONBLOCK)
	if err != nil {
		f.Close()
		return fmt.Errorf("create an eventfd: %w", err)
	}
	if err := register(cg.path, efd, f); err != nil {
		unix.Close(efd)
		f.Close()
		return err
	}
	if err := l.poll(efd); err != nil {
		unix.Close(efd)
		f.Close()
		return err
	}
	cg.file, cg.efd = f, efd
	l.byFD[efd] = cg
	return nil
}

// register writes "<eventfd> <fd of memory.oom_control>" to the cgroup's
// cgroup.event_control.
func register(dir string, efd int, control *os.File) error {
	ctl, err := os.OpenFile(filepath.Join(dir, eventControl), os.O_WRONLY, 0)
	if err != nil {
		return fmt.Errorf("open %s: %w", eventControl, err)
	}
	defer ctl.Close()
	// SyscallConn, not Fd: Fd would make the file blocking for good.
	raw, err := control.SyscallConn()
	if err != nil {
		return err
	}
	var werr error
	err = raw.Control(func(fd uintptr) {
		_, werr = fmt.Fprintf(ctl, "%d %d", efd, fd)
	})
	if err == nil {
		err = werr
	}
	if err != nil {
		return fmt.Errorf("register for OOM notification in %s: %w", eventControl, err)
	}
	return nil
}

// woken handles a signalled eventfd: read the counter now and again soon.
func (l *loop) woken(efd int) {
	cg := l.byFD[efd]
	if cg == nil {
		return
	}
	var buf [8]byte
	unix.Read(efd, buf[:])
	if !l.check(cg, true) {
		// The kernel signals the eventfd when it removes the cgroup too.
		if !exists(cg.path) {
			l.remove(cg.path)
		}
		return
	}
	now := time.Now()
	cg.woken = now
	cg.recheckStep = recheckFast
	cg.recheckAt = now.Add(cg.recheckStep)
	l.rechecks[cg] = struct{}{}
}

// recheck reads again the counters whose time has come.
func (l *loop) recheck(now time.Time) {
	for cg := range l.rechecks {
		if now.Before(cg.recheckAt) {
			continue
		}
		if !l.check(cg, true) {
			delete(l.rechecks, cg)
			continue
		}
		if now.Sub(cg.woken) >= recheckFastFor {
			cg.recheckStep *= 2
		}
		cg.recheckAt = now.Add(cg.recheckStep)
		if cg.recheckAt.Sub(cg.woken) > recheckFor {
			delete(l.rechecks, cg)
		}
	}
}

// global reads the node's count of OOM kills and, when it rose, every
// cgroup's counter. A vmstat that cannot be read is logged once and no
// longer read.
func (l *loop) global(now time.Time) {
	if now.Before(l.globalAt) {
		return
	}
	l.globalAt = now.Add(globalEvery)
	data, err := os.ReadFile(vmstat)
	var n uint64
	if err == nil {
		n, err = oomKills(data)
	}
	if err != nil {
		l.w.log.Warn("OOM-kill watcher: cannot read the node's OOM kills; kills by the global OOM killer are missed on cgroup v1", "err", err)
		l.globalAt = time.Time{}
		return
	}
	if n != l.globalKills && !l.globalFirst {
		for _, cg := range l.byPath {
			if cg.file != nil {
				l.check(cg, true)
			}
		}
	}
	l.globalKills, l.globalFirst = n, false
}
