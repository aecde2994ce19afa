package conditions

import (
	"context"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"time"

	"golang.org/x/sys/unix"
)

// psiTriggerSpec is a trigger "some|full <stall µs> <window µs>" parsed.
type psiTriggerSpec struct {
	kind          string
	stall, window time.Duration
}

// parsePSITrigger checks a trigger against the kernel's bounds (a window
// of 500 ms to 10 s and a stall within it) and returns it parsed.
func parsePSITrigger(trigger string) (psiTriggerSpec, error) {
	fields := strings.Fields(trigger)
	if len(fields) != 3 || (fields[0] != "some" && fields[0] != "full") {
		return psiTriggerSpec{}, errors.New(`want "some|full <stall µs> <window µs>"`)
	}
	stall, err1 := strconv.ParseUint(fields[1], 10, 32)
	windowUS, err2 := strconv.ParseUint(fields[2], 10, 32)
	if err1 != nil || err2 != nil {
		return psiTriggerSpec{}, errors.New("stall and window must be whole microseconds")
	}
	if windowUS < 500_000 || windowUS > 10_000_000 {
		return psiTriggerSpec{}, errors.New("window must be between 500000 and 10000000 µs")
	}
	if stall == 0 || stall > windowUS {
		return psiTriggerSpec{}, errors.New("stall must be positive and at most the window")
	}
	return psiTriggerSpec{kind: fields[0], stall: time.Duration(stall) * time.Microsecond,
		window: time.Duration(windowUS) * time.Microsecond}, nil
}

// widenedTrigger is trigger with its window rounded up to a multiple of
// 2 s (what the kernel gives an unprivileged process) and its stall scaled
// to the same share of time; ok is false when the window already is one.
func widenedTrigger(trigger string) (wide string, window time.Duration, ok bool) {
	t, err := parsePSITrigger(trigger)
	if err != nil || t.window%(2*time.Second) == 0 {
		return "", 0, false
	}
	window = (t.window/(2*time.Second) + 1) * 2 * time.Second
	stall := uint64(t.stall/time.Microsecond) * uint64(window/time.Microsecond) / uint64(t.window/time.Microsecond)
	return fmt.Sprintf("%s %d %d", t.kind, stall, window/time.Microsecond), window, true
}

// psiTrigger wakes its caller each time the kernel signals that trigger's
// stall threshold was crossed in /proc/pressure/memory under procRoot.
type psiTrigger struct {
	path    string
	trigger string
	// armed, when set, is called once the kernel accepted the trigger.
	armed func(bool)
	// fired, when set, is called on each event, before the wake-up.
	fired func()
}

// watch registers the trigger and blocks until ctx ends. It returns at once
// with the reason when triggers are unavailable: no PSI, a fixture instead
// of procfs, or a window the kernel refuses (unprivileged processes may only
// use windows that are multiples of 2 s).
func (p psiTrigger) watch(ctx context.Context, wake chan<- struct{}) error {
	fd, err := unix.Open(p.path, unix.O_RDWR|unix.O_NONBLOCK|unix.O_CLOEXEC, 0)
	if err != nil {
		return fmt.Errorf("open %s for a PSI trigger: %w", p.path, err)
	}
	defer unix.Close(fd)
	var fs unix.Statfs_t
	if err := unix.Fstatfs(fd, &fs); err != nil {
		return fmt.Errorf("statfs %s: %w", p.path, err)
	}
	if fs.Type != unix.PROC_SUPER_MAGIC {
		return fmt.Errorf("%s is not on procfs; PSI triggers need the kernel's file", p.path)
	}
	if _, err := unix.Write(fd, append([]byte(p.trigger), 0)); err != nil {
		if errors.Is(err, unix.EINVAL) {
			return fmt.Errorf("write PSI trigger %q: %w (unprivileged windows must be multiples of 2 s)", p.trigger, err)
		}
		return fmt.Errorf("write PSI trigger %q: %w", p.trigger, err)
	}
	if p.armed != nil {
		p.armed(true)
		defer p.armed(false)
	}
	// A pipe lets ctx interrupt poll without a timeout loop.
	var pipe [2]int
	if err := unix.Pipe2(pipe[:], unix.O_CLOEXEC|unix.O_NONBLOCK); err != nil {
		return fmt.Errorf("create pipe: %w", err)
	}
	written := make(chan struct{})
	stop := context.AfterFunc(ctx, func() {
		unix.Write(pipe[1], []byte{0})
		close(written)
	})
	defer func() {
		if !stop() {
			<-written // never close the pipe under a running write
		}
		unix.Close(pipe[0])
		unix.Close(pipe[1])
	}()
	for {
		fds := []unix.PollFd{{Fd: int32(fd), Events: unix.POLLPRI}, {Fd: int32(pipe[0]), Events: unix.POLLIN}}
		if _, err := unix.Poll(fds, -1); err != nil {
			if errors.Is(err, unix.EINTR) {
				continue
			}
			return fmt.Errorf("poll PSI trigger: %w", err)
		}
		if fds[1].Revents != 0 || ctx.Err() != nil {
			return nil
		}
		if fds[0].Revents&unix.POLLERR != 0 {
			return fmt.Errorf("PSI trigger on %s reported an error (the file went away?)", p.path)
		}
		if fds[0].Revents&unix.POLLPRI != 0 {
			if p.fired != nil {
				p.fired()
			}
			wakeUp(wake)
		}
	}
}

func pressurePath(procRoot, resource string) string {
	return filepath.Join(procRoot, "pressure", resource)
}

func fileExists(path string) bool {
	_, err := os.Stat(path)
	return err == nil
}
