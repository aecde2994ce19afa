package coordinator

import (
	"context"
	"errors"
	"log/slog"
	"sync"
	"time"

	"github.com/nodeward/nodeward/updategraph"
)

// updateSources owns the pools' update graphs: one updategraph.Fetcher per
// distinct source (URL, dialect, channel, architecture), made when a pool
// first names it and dropped when none does. Its own goroutine (run)
// fetches each source on a schedule and after a failure when the Fetcher's
// backoff ends, and calls changed when a graph or its failure changed: a
// planning pass only reads what was fetched, never waits on a service.
type updateSources struct {
	cfg      updategraph.FetchConfig
	interval time.Duration
	now      func() time.Time
	log      *slog.Logger
	// changed enqueues the pools, to show the new graph or failure.
	changed func()
	// wake tells run a source was added, to fetch it now.
	wake chan struct{}

	mu      sync.Mutex
	sources map[updategraph.Source]*sourceState
}

// sourceState is one source's Fetcher and what its last fetches gave.
type sourceState struct {
	fetcher *updategraph.Fetcher
	// invalid is why NewFetcher refused the source: it is never fetched.
	invalid error
	// last is the last good graph (Graph nil before the first); failure is
	// the last fetch's error, nil after a success.
	last    updategraph.Snapshot
	failure *updategraph.FetchError
	fetched bool
	due     time.Time
}

// graphRead is what a pass reads of a source.
type graphRead struct {
	// last is the last good graph; its Graph is nil when none was read.
	last updategraph.Snapshot
	// reason and err say why the last fetch failed; err is nil after a
	// success and while the first fetch is pending.
	reason string
	err    error
	// pending: no fetch of the source has ended yet.
	pending bool
}

func newUpdateSources(cfg updategraph.FetchConfig, interval time.Duration, now func() time.Time, log *slog.Logger, changed func()) *updateSources {
	cfg.Now = now
	return &updateSources{cfg: cfg, interval: interval, now: now, log: log, changed: changed,
		wake: make(chan struct{}, 1), sources: map[updategraph.Source]*sourceState{}}
}

// read returns what was fetched of src, and registers src (fetched at once
// by run) the first time a pool names it.
func (s *updateSources) read(src updategraph.Source) graphRead {
	s.mu.Lock()
	defer s.mu.Unlock()
	st, ok := s.sources[src]
	if !ok {
		st = &sourceState{}
		st.fetcher, st.invalid = updategraph.NewFetcher(src, s.cfg)
		s.sources[src] = st
		select {
		case s.wake <- struct{}{}:
		default:
		}
	}
	switch {
	case st.invalid != nil:
		return graphRead{reason: updategraph.ReasonInvalidSource, err: st.invalid}
	case !st.fetched:
		return graphRead{pending: true}
	case st.failure != nil:
		return graphRead{last: st.last, reason: st.failure.Reason, err: st.failure}
	}
	return graphRead{last: st.last}
}

// retain drops the sources no pool names any more.
func (s *updateSources) retain(named map[updategraph.Source]bool) {
	s.mu.Lock()
	defer s.mu.Unlock()
	for src := range s.sources {
		if !named[src] {
			delete(s.sources, src)
		}
	}
}

// run fetches the sources when due until ctx ends; named lists the sources
// the pools name now, so that the others are dropped.
func (s *updateSources) run(ctx context.Context, named func() map[updategraph.Source]bool) {
	for {
		s.retain(named())
		s.fetchDue(ctx)
		t := time.NewTimer(s.untilNext())
		select {
		case <-ctx.Done():
			t.Stop()
			return
		case <-s.wake:
		case <-t.C:
		}
		t.Stop()
	}
}

// untilNext is how long run waits for the next source due, at most an
// interval.
func (s *updateSources) untilNext() time.Duration {
	s.mu.Lock()
	defer s.mu.Unlock()
	now, wait := s.now(), s.interval
	for _, st := range s.sources {
		if st.invalid == nil {
			wait = min(wait, st.due.Sub(now))
		}
	}
	return max(wait, 10*time.Millisecond)
}

// fetchDue fetches every source whose time has come, one after the other,
// outside the lock (a slow service delays the other sources by at most the
// fetch timeout, never a pass).
func (s *updateSources) fetchDue(ctx context.Context) {
	s.mu.Lock()
	now := s.now()
	due := map[updategraph.Source]*sourceState{}
	for src, st := range s.sources {
		if st.invalid == nil && !now.Before(st.due) {
			due[src] = st
		}
	}
	s.mu.Unlock()
	changed := false
	for src, st := range due {
		snap, err := st.fetcher.Fetch(ctx)
		if ctx.Err() != nil {
			return
		}
		changed = s.record(src, st, snap, err) || changed
	}
	if changed {
		s.changed()
	}
}

// record keeps a fetch's outcome and reports whether a pool could see it
// differently: a new graph, a first fetch, a failure begun, changed or
// ended. A 304 or the same failure again changes nothing.
func (s *updateSources) record(src updategraph.Source, st *sourceState, snap updategraph.Snapshot, err error) bool {
	s.mu.Lock()
	defer s.mu.Unlock()
	first := !st.fetched
	st.fetched = true
	var fe *updategraph.FetchError
	if err != nil && !errors.As(err, &fe) {
		fe = &updategraph.FetchError{Reason: updategraph.ReasonRemoteFailed, URL: src.URL, Err: err}
	}
	if fe != nil {
		changed := st.failure == nil || st.failure.Error() != fe.Error()
		st.failure, st.due = fe, fe.RetryAt
		if st.due.IsZero() { // not the Fetcher's: no backoff of its own
			st.due = s.now().Add(s.interval)
		}
		if changed {
			s.log.Warn("update graph not retrieved", "url", src.URL, "channel", src.Channel, "reason", fe.Reason, "err", fe.Err, "retryAt", fe.RetryAt)
		}
		return first || changed
	}
	changed := first || st.failure != nil || snap.Graph != st.last.Graph
	st.failure, st.last, st.due = nil, snap, s.now().Add(s.interval)
	return changed
}
