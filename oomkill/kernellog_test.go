package oomkill_test

import (
	"fmt"
	"strconv"
	"strings"
	"testing"
	"time"

	"golang.org/x/sys/unix"
)

// kernelLog reads /dev/kmsg from the end, to find when the kernel killed
// a process by its own clock (the printk clock, calibrated against
// CLOCK_MONOTONIC with a record the test writes).
type kernelLog struct {
	fd     int
	offset time.Duration // printk clock minus CLOCK_MONOTONIC
}

func openKernelLog(t *testing.T) *kernelLog {
	t.Helper()
	// A raw fd: os.File.Fd would make it blocking.
	fd, err := unix.Open("/dev/kmsg", unix.O_RDWR|unix.O_NONBLOCK|unix.O_CLOEXEC, 0)
	if err != nil {
		t.Logf("no kernel log, no latency: %v", err)
		return nil
	}
	t.Cleanup(func() { unix.Close(fd) })
	if _, err := unix.Seek(fd, 0, unix.SEEK_END); err != nil {
		t.Logf("kernel log: %v", err)
		return nil
	}
	l := &kernelLog{fd: fd}
	nonce := fmt.Sprintf("nodeward-oomkill calibration %d", time.Now().UnixNano())
	before := sinceBoot()
	// The newline ends the record: until then readers do not see it.
	if _, err := unix.Write(fd, []byte(nonce+"\n")); err != nil {
		t.Logf("kernel log: %v", err)
		return nil
	}
	after := sinceBoot()
	ts, ok := l.find(nonce)
	if !ok {
		t.Logf("kernel log: own record not found")
		return nil
	}
	mid := before.Add(after.Sub(before) / 2)
	l.offset = ts - time.Duration(mid.UnixNano())
	t.Logf("printk clock - CLOCK_MONOTONIC = %v (±%v)", l.offset, after.Sub(before)/2)
	return l
}

// killed is when the kernel logged the kill of pid, on CLOCK_MONOTONIC.
func (l *kernelLog) killed(pid int) (time.Time, bool) {
	ts, ok := l.find(fmt.Sprintf("Killed process %d ", pid))
	return time.Unix(0, int64(ts-l.offset)), ok
}

// find reads records until one containing s, for up to 2 s.
func (l *kernelLog) find(s string) (time.Duration, bool) {
	buf := make([]byte, 16<<10)
	for deadline := time.Now().Add(2 * time.Second); time.Now().Before(deadline); {
		n, err := unix.Read(l.fd, buf)
		if err == unix.EAGAIN {
			time.Sleep(5 * time.Millisecond)
			continue
		}
		if err != nil { // EPIPE: records overwritten; go on
			continue
		}

		prefix, msg, ok := strings.Cut(string(buf[:n]), ";")
		fields := strings.Split(prefix, ",")
		if !ok || len(fields) < 3 || !strings.Contains(msg, s) {
			continue
		}
		us, err := strconv.ParseInt(fields[2], 10, 64)
		if err != nil {
			continue
		}
		return time.Duration(us) * time.Microsecond, true
	}
	return 0, false
}
