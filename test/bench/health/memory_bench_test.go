package health

import (
	"os"
	"strconv"
	"strings"
	"testing"
	"time"

	"golang.org/x/sys/unix"

	"github.com/nodeward/nodeward/daemon"
	"github.com/nodeward/nodeward/test/cluster"
	"github.com/nodeward/nodeward/test/measure"
	"github.com/nodeward/nodeward/test/testenv"
)

// BenchmarkMemoryDetectionToTaint: a thrasher starts in a 32 MiB memory
// cgroup (random reads of a 256 MiB file, so the cgroup's page cache keeps
// being evicted and refaulted: real memory stall) →
// nodeward.io/memory-pressure visible through a watch. The memory probe
// runs with its defaults (a poll every 10 s, so a detection well under
// 10 s is PSI's). Sub-benchmarks:
//   - default: the default configuration, trigger "full 75000 1000000". An
//     agent without CAP_SYS_RESOURCE (this project's machines) is refused
//     the 1 s window and polls the stall totals every 100 ms instead; an
//     independent observer in the benchmark reads the same totals every
//     5 ms and records when 75 ms of full stall have first accumulated
//     within 1 s (no detector of that threshold can be earlier):
//     the difference to the taint is nodeward's own part.
//   - full, some: the kernel's trigger with a 2 s window, which the kernel
//     gives unprivileged agents ("full 150000 2000000" or the same on
//     "some"), with an independent observer of the same trigger.
//
// One sample per iteration; between samples the thrasher stops and the
// taint clears (the window, half a window of grace, the quiet period).
// Run as root:
//
//	NODEWARD_TESTBIN_DIR=... go test -run '^$' -bench BenchmarkMemoryDetectionToTaint -benchtime 20x ./test/bench/health/
func BenchmarkMemoryDetectionToTaint(b *testing.B) {
	b.Run("default", func(b *testing.B) { benchMemory(b, "") })
	for _, trigger := range []string{"full 150000 2000000", "some 150000 2000000"} {
		b.Run(strings.Fields(trigger)[0], func(b *testing.B) { benchMemory(b, trigger) })
	}
}

// benchMemory measures trigger; "" is the default configuration.
func benchMemory(b *testing.B, trigger string) {
	thrash := testenv.NewMemoryThrash(b, 32<<20)
	cp := env.ControlPlane(b)
	ensureLeaseNamespace(b, cp.Client())
	node := cp.CreateNodes(b, cluster.NodeSpec{Prefix: "bench-mem", Count: 1})[0]
	cfg := benchConfig()
	cfg.Memory.Enabled = true
	if trigger != "" {
		cfg.Memory.Trigger = trigger
	}
	runHealth(b, daemon.Config{RestConfig: cp.Config(), NodeName: node, Health: &daemon.HealthConfig{Conditions: cfg}})
	changes := taintWatcher(b, cp.Client(), node, "nodeward.io/memory-pressure")
	var kernel <-chan time.Time
	if trigger != "" {
		kernel = kernelTriggerEvents(b, trigger)
	} else {
		b.Logf("CAP_SYS_RESOURCE %v: the default trigger is the kernel's if held, polled totals if not", hasCapSysResource(b))
	}
	samples := make([]time.Duration, 0, b.N)
	var kernelSamples, reached, ownPart []time.Duration
	b.ResetTimer()
	for range b.N {
		for len(kernel) > 0 {
			<-kernel
		}
		var threshold <-chan time.Time
		if trigger == "" {
			threshold = stallReached(b, "full", 75*time.Millisecond, time.Second)
		}
		start := time.Now()
		stop := thrash.Start(b)
		tainted := await(b, changes, true)
		samples = append(samples, tainted.Sub(start))
		select {
		case ev := <-kernel:
			kernelSamples = append(kernelSamples, ev.Sub(start))
		default:
		}
		if threshold != nil {
			select {
			case at := <-threshold:
				reached = append(reached, at.Sub(start))
				ownPart = append(ownPart, tainted.Sub(at))
				b.Logf("75 ms of full stall within 1 s after %v, taint after %v", at.Sub(start), tainted.Sub(start))
			case <-time.After(time.Second):
			}
		}
		stop()
		await(b, changes, false)
	}
	b.StopTimer()
	report(b, samples)
	if len(kernelSamples) > 0 {
		b.ReportMetric(measure.Milliseconds(measure.Quantile(kernelSamples, 0.5)), "kernel-event-p50-ms")
		b.ReportMetric(measure.Milliseconds(measure.Quantile(kernelSamples, 1)), "kernel-event-max-ms")
	}
	if len(reached) > 0 {
		b.ReportMetric(measure.Milliseconds(measure.Quantile(reached, 0.5)), "stall-75ms-p50-ms")
		b.ReportMetric(measure.Milliseconds(measure.Quantile(reached, 1)), "stall-75ms-max-ms")
		b.ReportMetric(measure.Milliseconds(measure.Quantile(ownPart, 0.5)), "stall→taint-p50-ms")
		b.ReportMetric(measure.Milliseconds(measure.Quantile(ownPart, 1)), "stall→taint-max-ms")
	}
}

// stallReached reads kind's stall total in /proc/pressure/memory every
// 5 ms, as an observer independent of the agent, and sends the first time
// when threshold of stall has accumulated within the last window (the
// readings of the last window kept, from the call on): no detector of
// that threshold over that window can be earlier. It gives up after 30 s
// or with the benchmark.
func stallReached(b *testing.B, kind string, threshold, window time.Duration) <-chan time.Time {
	read := func() time.Duration {
		data, err := os.ReadFile("/proc/pressure/memory")
		if err != nil {
			b.Error(err)
			return 0
		}
		for _, line := range strings.Split(string(data), "\n") {
			if rest, ok := strings.CutPrefix(line, kind+" "); ok {
				_, v, _ := strings.Cut(rest, "total=")
				us, err := strconv.ParseInt(strings.TrimSpace(v), 10, 64)
				if err != nil {
					b.Errorf("PSI %s total %q: %v", kind, v, err)
				}
				return time.Duration(us) * time.Microsecond
			}
		}
		b.Errorf("no PSI %s line", kind)
		return 0
	}
	type reading struct {
		at    time.Time
		total time.Duration
	}
	out := make(chan time.Time, 1)
	readings := []reading{{time.Now(), read()}}
	go func() {
		ctx := b.Context()
		for deadline := time.Now().Add(30 * time.Second); time.Now().Before(deadline) && ctx.Err() == nil; time.Sleep(5 * time.Millisecond) {
			r := reading{time.Now(), read()}
			for len(readings) > 1 && r.at.Sub(readings[1].at) >= window {
				readings = readings[1:]
			}
			// readings[0] is the newest reading at least one window old,
			// or the first: the stall since is that of at most a window
			// and 5 ms.
			if r.total-readings[0].total >= threshold {
				out <- r.at
				return
			}
			readings = append(readings, r)
		}
	}()
	return out
}

// hasCapSysResource reads this process's effective capabilities.
func hasCapSysResource(b *testing.B) bool {
	data, err := os.ReadFile("/proc/self/status")
	if err != nil {
		b.Fatal(err)
	}
	for _, line := range strings.Split(string(data), "\n") {
		if v, ok := strings.CutPrefix(line, "CapEff:"); ok {
			bits, err := strconv.ParseUint(strings.TrimSpace(v), 16, 64)
			if err != nil {
				b.Fatal(err)
			}
			return bits&(1<<unix.CAP_SYS_RESOURCE) != 0
		}
	}
	return false
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
