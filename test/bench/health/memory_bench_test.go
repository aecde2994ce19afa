package health

import (
	"strings"
	"testing"
	"time"

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
	runHealth(b, daemon.HealthConfig{RestConfig: cp.Config(), NodeName: node, Config: cfg})
	changes := taintWatcher(b, cp.Client(), node, "nodeward.io/memory-pressure")
	samples := make([]time.Duration, 0, b.N)
	b.ResetTimer()
	for range b.N {
		start := time.Now()
		stop := thrash.Start(b)
		samples = append(samples, await(b, changes, true).Sub(start))
		stop()
		await(b, changes, false)
	}
	b.StopTimer()
	report(b, samples)
}
