package health

import (
	"slices"
	"strings"
	"testing"
	"time"

	"golang.org/x/sys/unix"

	"github.com/nodeward/nodeward/daemon"
	"github.com/nodeward/nodeward/test/cluster"
	"github.com/nodeward/nodeward/test/testenv"
)

// BenchmarkMemoryDetectionToTaint: a thrasher starts in a 32 MiB memory
// cgroup (random reads of a 256 MiB file, so the cgroup's page cache keeps
// being evicted and refaulted: real memory stall) →
// nodeward.io/memory-pressure visible through a watch. The memory probe
// runs with its defaults (a poll every 10 s, so a detection well under
// 10 s is the trigger's) and the default trigger "full 150000 2000000" or
// the same threshold on "some" stall. One sample per iteration; between
// samples the thrasher stops and the taint clears (the trigger's 2 s
// window, half a window of grace, then the next poll).
func BenchmarkMemoryDetectionToTaint(b *testing.B) {
	for _, trigger := range []string{"full 150000 2000000", "some 150000 2000000"} {
		b.Run(strings.Fields(trigger)[0], func(b *testing.B) { benchMemory(b, trigger) })
	}
}

func benchMemory(b *testing.B, trigger string) {
	thrash := testenv.NewMemoryThrash(b, 32<<20)
	cp := env.ControlPlane(b)
	ensureLeaseNamespace(b, cp.Client())
	node := cp.CreateNodes(b, cluster.NodeSpec{Prefix: "bench-mem", Count: 1})[0]
	cfg := benchConfig()
	cfg.Memory.Enabled, cfg.Memory.Trigger = true, trigger
	runHealth(b, daemon.Config{RestConfig: cp.Config(), NodeName: node, Health: &daemon.HealthConfig{Conditions: cfg}})
	changes := taintWatcher(b, cp.Client(), node, "nodeward.io/memory-pressure")
	kernel := kernelTriggerEvents(b, trigger)
	samples := make([]time.Duration, 0, b.N)
	var kernelSamples []time.Duration
	b.ResetTimer()
	for range b.N {
		for len(kernel) > 0 {
			<-kernel
		}
		start := time.Now()
		stop := thrash.Start(b)
		samples = append(samples, await(b, changes, true).Sub(start))
		select {
		case ev := <-kernel:
			kernelSamples = append(kernelSamples, ev.Sub(start))
		default:
		}
		stop()
		await(b, changes, false)
	}
	b.StopTimer()
	report(b, samples)
	if len(kernelSamples) > 0 {
		slices.Sort(kernelSamples)
		b.ReportMetric(float64(kernelSamples[len(kernelSamples)/2].Microseconds())/1000, "kernel-event-p50-ms")
		b.ReportMetric(float64(kernelSamples[len(kernelSamples)-1].Microseconds())/1000, "kernel-event-max-ms")
	}
}

// kernelTriggerEvents registers the same trigger as the agent's, as an
// independent observer, and sends the time of each kernel event: the
// difference to the taint's time is nodeward's own part of the latency.
func kernelTriggerEvents(b *testing.B, trigger string) <-chan time.Time {
	fd, err := unix.Open("/proc/pressure/memory", unix.O_RDWR|unix.O_NONBLOCK|unix.O_CLOEXEC, 0)
	if err != nil {
		b.Fatal(err)
	}
	if _, err := unix.Write(fd, append([]byte(trigger), 0)); err != nil {
		unix.Close(fd)
		b.Fatalf("register trigger %q: %v", trigger, err)
	}
	out := make(chan time.Time, 64)
	done, exited := make(chan struct{}), make(chan struct{})
	b.Cleanup(func() { close(done); <-exited; unix.Close(fd) })
	go func() {
		defer close(exited)
		for {
			fds := []unix.PollFd{{Fd: int32(fd), Events: unix.POLLPRI}}
			n, _ := unix.Poll(fds, 100) // the timeout only lets the loop see done
			select {
			case <-done:
				return
			default:
			}
			if n > 0 && fds[0].Revents&unix.POLLPRI != 0 {
				select {
				case out <- time.Now():
				default:
				}
			}
		}
	}()
	return out
}
