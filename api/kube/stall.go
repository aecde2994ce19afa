package kube

import (
	"context"
	"log/slog"
	"sync"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/watch"
	"k8s.io/client-go/tools/cache"
)

// DefaultStallInterval is how long a wait on the API server stays quiet
// before StallWarner's first warning.
const DefaultStallInterval = 30 * time.Second

// maxStallInterval caps the backoff between repeated warnings.
const maxStallInterval = 5 * time.Minute

// StallWarner makes a wait on the API server visible: while What (a watch,
// caches, a Lease) has not been reached, it logs a warning naming the
// server and the last error after Interval, then again after twice that,
// and so on up to five minutes apart; once reached, an info line. The
// agent and the coordinator share it; its methods are safe for concurrent
// use.
type StallWarner struct {
	Log    *slog.Logger
	Server string
	What   string
	// Interval before the first warning; DefaultStallInterval when zero.
	Interval time.Duration

	mu     sync.Mutex
	err    error
	since  time.Time     // zero: not waiting
	next   time.Duration // the next warning, counted from since
	gap    time.Duration // the pause after the next warning
	warned bool
}

// Observe records the last error met while waiting (nil is ignored).
func (w *StallWarner) Observe(err error) {
	if err == nil {
		return
	}
	w.mu.Lock()
	w.err = err
	w.mu.Unlock()
}

// Pending says the wait goes on at now; it warns when a warning is due.
func (w *StallWarner) Pending(now time.Time) {
	w.mu.Lock()
	defer w.mu.Unlock()
	if w.since.IsZero() {
		w.since, w.next, w.gap = now, w.interval(), min(2*w.interval(), maxStallInterval)
		return
	}
	waited := now.Sub(w.since)
	if waited < w.next {
		return
	}
	errText := "no response yet"
	if w.err != nil {
		errText = w.err.Error()
	}
	w.log().Warn(w.What+" not synced with the API server", "server", w.Server,
		"waited", waited.Round(time.Second).String(), "err", errText)
	w.warned = true
	w.next, w.gap = waited+w.gap, min(2*w.gap, maxStallInterval)
}

// Reached ends the wait: an info line (with attrs) when always is true or
// a warning was logged, then the warner is ready for the next wait.
func (w *StallWarner) Reached(now time.Time, always bool, attrs ...any) {
	w.mu.Lock()
	defer w.mu.Unlock()
	if w.since.IsZero() && !always {
		return
	}
	if always || w.warned {
		args := append([]any{"server", w.Server}, attrs...)
		if !w.since.IsZero() {
			args = append(args, "after", now.Sub(w.since).Round(time.Millisecond).String())
		}
		w.log().Info(w.What+" synced", args...)
	}
	w.since, w.err, w.warned = time.Time{}, nil, false
}

func (w *StallWarner) interval() time.Duration {
	if w.Interval > 0 {
		return w.Interval
	}
	return DefaultStallInterval
}

func (w *StallWarner) log() *slog.Logger {
	if w.Log == nil {
		return slog.Default()
	}
	return w.Log
}

// WaitForSync waits until every synced func reports true, warning through
// w meanwhile; false when ctx ended first. attrs go on the info line.
func (w *StallWarner) WaitForSync(ctx context.Context, synced []cache.InformerSynced, attrs func() []any) bool {
	tick := time.NewTicker(100 * time.Millisecond)
	defer tick.Stop()
	for {
		all := true
		for _, s := range synced {
			all = all && s()
		}
		if all {
			var a []any
			if attrs != nil {
				a = attrs()
			}
			w.Reached(time.Now(), true, a...)
			return true
		}
		w.Pending(time.Now())
		select {
		case <-ctx.Done():
			return false
		case <-tick.C:
		}
	}
}

// ListerWatcher wraps lw so that its list and watch errors reach Observe:
// the warning then names why the informer does not sync. Its calls also
// time the waits after the first sync: an informer whose watch broke (an
// API server restart) retries its list and watch, and a failing retry
// starts a wait that warns as the first one does, a succeeding one ends it
// (with an info line when it had warned).
func (w *StallWarner) ListerWatcher(lw cache.ListerWatcher) cache.ListerWatcher {
	return &observedLW{inner: cache.ToListerWatcherWithContext(lw), w: w}
}

type observedLW struct {
	inner cache.ListerWatcherWithContext
	w     *StallWarner
}

func (o *observedLW) ListWithContext(ctx context.Context, opts metav1.ListOptions) (runtime.Object, error) {
	obj, err := o.inner.ListWithContext(ctx, opts)
	o.w.call(err)
	return obj, err
}

func (o *observedLW) WatchWithContext(ctx context.Context, opts metav1.ListOptions) (watch.Interface, error) {
	wi, err := o.inner.WatchWithContext(ctx, opts)
	o.w.call(err)
	return wi, err
}

// call records the outcome of one list or watch call: a failure keeps (or
// starts) the wait, a success ends it.
func (w *StallWarner) call(err error) {
	now := time.Now()
	if err != nil {
		w.Observe(err)
		w.Pending(now)
		return
	}
	w.Reached(now, false)
}

func (o *observedLW) List(opts metav1.ListOptions) (runtime.Object, error) {
	return o.ListWithContext(context.Background(), opts)
}

func (o *observedLW) Watch(opts metav1.ListOptions) (watch.Interface, error) {
	return o.WatchWithContext(context.Background(), opts)
}
