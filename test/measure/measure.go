// Package measure holds what the project's benchmarks share to turn
// observations into figures: the quantiles they report, and the moment a
// watch first saw something. One definition of a percentile, so that the
// figures in docs/benchmarks.md mean the same everywhere.
package measure

import (
	"context"
	"fmt"
	"math"
	"slices"
	"sync"
	"testing"
	"time"
)

// Quantile is the q-quantile of samples (0 < q ≤ 1) by the nearest rank:
// the smallest sample with at least q of them at or below it. Of 20
// samples, p50 is the 10th and p99 the largest. samples is not reordered;
// it must not be empty.
func Quantile(samples []time.Duration, q float64) time.Duration {
	s := slices.Clone(samples)
	slices.Sort(s)
	rank := int(math.Ceil(q*float64(len(s)))) - 1
	return s[min(max(rank, 0), len(s)-1)]
}

// Milliseconds is d in milliseconds, to the microsecond, for ReportMetric.
func Milliseconds(d time.Duration) float64 { return float64(d.Microseconds()) / 1000 }

// ReportQuantiles reports the p50 and p99 of samples in milliseconds, as
// <name>-p50-ms and <name>-p99-ms ("p50-ms" and "p99-ms" for an empty
// name). Nothing is reported for no samples.
func ReportQuantiles(b *testing.B, name string, samples []time.Duration) {
	if len(samples) == 0 {
		return
	}
	if name != "" {
		name += "-"
	}
	b.ReportMetric(Milliseconds(Quantile(samples, 0.5)), name+"p50-ms")
	b.ReportMetric(Milliseconds(Quantile(samples, 0.99)), name+"p99-ms")
}

// FirstSeen records when each key was first seen, from any goroutine, and
// lets a waiter block until it is.
type FirstSeen struct {
	mu   sync.Mutex
	at   map[string]time.Time
	seen map[string]chan struct{}
}

// NewFirstSeen has seen nothing yet.
func NewFirstSeen() *FirstSeen {
	return &FirstSeen{at: map[string]time.Time{}, seen: map[string]chan struct{}{}}
}

// chanOf is closed once key is seen; the caller holds f.mu.
func (f *FirstSeen) chanOf(key string) chan struct{} {
	if f.seen[key] == nil {
		f.seen[key] = make(chan struct{})
	}
	return f.seen[key]
}

// Mark records key seen at when, unless it was seen before.
func (f *FirstSeen) Mark(key string, when time.Time) {
	f.mu.Lock()
	defer f.mu.Unlock()
	if _, ok := f.at[key]; ok {
		return
	}
	f.at[key] = when
	close(f.chanOf(key))
}

// Wait returns when key was first seen, waiting until then, timeout or
// ctx's end, whichever comes first.
func (f *FirstSeen) Wait(ctx context.Context, key string, timeout time.Duration) (time.Time, error) {
	f.mu.Lock()
	ch := f.chanOf(key)
	f.mu.Unlock()
	t := time.NewTimer(timeout)
	defer t.Stop()
	select {
	case <-ch:
	case <-t.C:
		return time.Time{}, fmt.Errorf("%s not seen within %s", key, timeout)
	case <-ctx.Done():
		return time.Time{}, fmt.Errorf("waiting for %s: %w", key, ctx.Err())
	}
	f.mu.Lock()
	defer f.mu.Unlock()
	return f.at[key], nil
}
