package health

import (
	"testing"
	"time"

	"golang.org/x/sys/unix"

	"github.com/nodeward/nodeward/daemon"
	"github.com/nodeward/nodeward/kmsg"
	"github.com/nodeward/nodeward/test/cluster"
	"github.com/nodeward/nodeward/test/kernelevents"
)

// BenchmarkKernelRecordToTaint: the kernel remounts a real ext4 filesystem
// read-only after an error (its record is logged by the write that
// triggers the error) → nodeward.io/readonly-filesystem visible through a
// watch of the Node. Each iteration makes a fresh filesystem (not timed),
// fails it, waits for the taint, unmounts it and waits for the taint to go
// (re-check every 100 ms, quiet period 100 ms).
func BenchmarkKernelRecordToTaint(b *testing.B) {
	kernelevents.Lock(b)
	cp := env.ControlPlane(b)
	ensureLeaseNamespace(b, cp.Client())
	node := cp.CreateNodes(b, cluster.NodeSpec{Prefix: "bench-kernel", Count: 1})[0]
	cfg := benchConfig()
	cfg.Kernel.Enabled = true
	cfg.Kernel.Lookback.Duration = 0
	cfg.Kernel.Interval.Duration = 100 * time.Millisecond
	runHealth(b, daemon.Config{RestConfig: cp.Config(), NodeName: node, Health: &daemon.HealthConfig{Conditions: cfg}})
	changes := taintWatcher(b, cp.Client(), node, "nodeward.io/readonly-filesystem")
	report(b, taintLatencies(b, changes, func() (cause, undo func()) {
		fs := kernelevents.NewExt4(b)
		return func() { fs.Fail(b) }, func() { fs.Unmount(b) }
	}))
}

// BenchmarkKernelLogReader: how many records a second the reader reads
// and parses from /dev/kmsg, with a ring buffer filled with 100-byte
// records (what a flood leaves it); records/s counts every record read,
// the process's lines it passes over included.
func BenchmarkKernelLogReader(b *testing.B) {
	kernelevents.Lock(b)
	kernelevents.WriteKmsg(b, kernelevents.Lines("nodeward reader bench", kernelevents.RingBufferSize(b)/100, 100)...)
	held := countRecords(b)
	b.ResetTimer()
	read := 0
	for read < b.N {
		r, err := kmsg.Open(kmsg.Options{})
		if err != nil {
			b.Fatal(err)
		}
		if err := r.ReadAvailable(func(kmsg.Record) {}); err != nil {
			b.Fatal(err)
		}
		r.Close()
		read += held
	}
	b.StopTimer()
	b.ReportMetric(float64(read)/b.Elapsed().Seconds(), "records/s")
	b.ReportMetric(0, "ns/op")
}

// countRecords is how many records of any facility the ring buffer holds.
func countRecords(b *testing.B) int {
	fd, err := unix.Open(kmsg.DevKmsg, unix.O_RDONLY|unix.O_NONBLOCK, 0)
	if err != nil {
		b.Fatal(err)
	}
	defer unix.Close(fd)
	buf := make([]byte, 16<<10)
	n := 0
	for {
		_, err := unix.Read(fd, buf)
		switch {
		case err == unix.EAGAIN:
			return n
		case err == unix.EPIPE:
			continue
		case err != nil:
			b.Fatal(err)
		}
		n++
	}
}
