package machineapi_test

// Helpers of the benchmarks of #36's figures (figures_bench_test.go,
// makespan_bench_test.go): timing and quantiles. The benchmarks share the
// tests' helpers otherwise (those take testing.TB where a benchmark calls
// them).

import (
	"fmt"
	"math"
	"slices"
	"sync"
	"testing"
	"time"
)

// firstSeen records when each key was first seen, and lets a waiter block
// until it is.
type firstSeen struct {
	mu   sync.Mutex
	at   map[string]time.Time
	seen map[string]chan struct{}
}

func newFirstSeen() *firstSeen {
	return &firstSeen{at: map[string]time.Time{}, seen: map[string]chan struct{}{}}
}

func (f *firstSeen) chanOf(key string) chan struct{} {
	if f.seen[key] == nil {
		f.seen[key] = make(chan struct{})
	}
	return f.seen[key]
}

// mark records key seen at when, if it was not seen before.
func (f *firstSeen) mark(key string, when time.Time) {
	f.mu.Lock()
	defer f.mu.Unlock()
	if _, ok := f.at[key]; ok {
		return
	}
	f.at[key] = when
	close(f.chanOf(key))
}

// wait returns when key was first seen, waiting up to timeout.
func (f *firstSeen) wait(key string, timeout time.Duration) (time.Time, error) {
	f.mu.Lock()
	ch := f.chanOf(key)
	f.mu.Unlock()
	select {
	case <-ch:
	case <-time.After(timeout):
		return time.Time{}, fmt.Errorf("%s not seen within %s", key, timeout)
	}
	f.mu.Lock()
	defer f.mu.Unlock()
	return f.at[key], nil
}

// quantile is the q-quantile of samples by the nearest rank (of 20
// samples, p99 is the largest).
func quantile(samples []time.Duration, q float64) time.Duration {
	s := slices.Clone(samples)
	slices.Sort(s)
	rank := int(math.Ceil(q*float64(len(s)))) - 1
	return s[max(rank, 0)]
}

// reportQuantiles reports the p50 and p99 of samples in milliseconds, as
// <name>-p50-ms and <name>-p99-ms.
func reportQuantiles(b *testing.B, name string, samples []time.Duration) {
	b.ReportMetric(float64(quantile(samples, 0.5).Microseconds())/1000, name+"-p50-ms")
	b.ReportMetric(float64(quantile(samples, 0.99).Microseconds())/1000, name+"-p99-ms")
}
