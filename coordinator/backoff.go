package coordinator

import (
	"sync"
	"time"
)

// writeBackoff owns the nodes whose writes keep failing: a node backing
// off has its writes skipped and is not granted, for 1 s, doubling with
// each consecutive failure up to 5 min; a successful write forgets it.
type writeBackoff struct {
	mu       sync.Mutex
	failures map[string]writeFailures
}

// writeFailures counts a node's consecutive failed writes.
type writeFailures struct {
	count int
	until time.Time
}

func newWriteBackoff() *writeBackoff { return &writeBackoff{failures: map[string]writeFailures{}} }

// failed backs node off after a failed write at now.
func (b *writeBackoff) failed(node string, now time.Time) {
	b.mu.Lock()
	defer b.mu.Unlock()
	f := b.failures[node]
	f.count++
	f.until = now.Add(min(time.Second<<min(f.count-1, 9), 5*time.Minute))
	b.failures[node] = f
}

// succeeded forgets node's failures.
func (b *writeBackoff) succeeded(node string) {
	b.mu.Lock()
	defer b.mu.Unlock()
	delete(b.failures, node)
}

// active returns the nodes backing off at now.
func (b *writeBackoff) active(now time.Time) map[string]bool {
	b.mu.Lock()
	defer b.mu.Unlock()
	out := map[string]bool{}
	for n, f := range b.failures {
		if now.Before(f.until) {
			out[n] = true
		}
	}
	return out
}

// nextRetry is how long until the first backoff ends (0: none).
func (b *writeBackoff) nextRetry(now time.Time) time.Duration {
	b.mu.Lock()
	defer b.mu.Unlock()
	var next time.Duration
	for _, f := range b.failures {
		if d := f.until.Sub(now); d > 0 && (next == 0 || d < next) {
			next = d
		}
	}
	return next
}
