package coordinator

import (
	"errors"
	"fmt"
	"net/http"
	"sync"
	"time"
)

// reconcileTimeout bounds one reconcile of a pool.
const reconcileTimeout = time.Minute

// Progress is what a coordinator replica reports on /readyz and /healthz:
// its role, whether its caches synced, and whether elections, the resync
// ticker and reconciles make progress. (Named apart from the nodes' health,
// which the agents report.)
// Pass one in Config.Progress; its methods are safe on a nil *Progress.
type Progress struct {
	now func() time.Time

	mu            sync.Mutex
	electing      bool // the election loop runs (standby or leading)
	leaseDuration time.Duration
	attempted     time.Time // last election attempt that completed
	leading       bool      // a Controller runs: leader, or no election
	leadingSince  time.Time
	synced        bool
	resync        time.Duration
	ticked        time.Time // last resync tick
	busySince     time.Time // a reconcile runs since; zero when idle
	stopped       bool
}

// NewProgress returns a Progress on clock now (time.Now when nil).
func NewProgress(now func() time.Time) *Progress {
	if now == nil {
		now = time.Now
	}
	return &Progress{now: now}
}

// Role names the replica's part: "not started", "standby", "leader
// (caches not synced)", "leader" or "stopped".
func (h *Progress) Role() string {
	h.mu.Lock()
	defer h.mu.Unlock()
	switch {
	case h.stopped:
		return "stopped"
	case h.leading && !h.synced:
		return "leader (caches not synced)"
	case h.leading:
		return "leader"
	case h.electing:
		return "standby"
	}
	return "not started"
}

// Ready is nil when the replica does its part: a standby waits for the
// leader Lease, a leader (or a coordinator without election) has synced its
// caches. It is an error before either, and once the coordinator stopped.
func (h *Progress) Ready() error {
	h.mu.Lock()
	defer h.mu.Unlock()
	switch {
	case h.stopped:
		return errors.New("coordinator stopped")
	case h.leading && !h.synced:
		return errors.New("leading; caches not synced yet")
	case h.leading, h.electing:
		return nil
	}
	return errors.New("not started")
}

// Live is nil while the loops make progress: election attempts complete
// (each is bounded by the renew deadline or the retry period), the resync
// ticker of a leader ticks, and no reconcile runs past its deadline.
func (h *Progress) Live() error {
	h.mu.Lock()
	defer h.mu.Unlock()
	now := h.now()
	var errs []error
	if h.stopped {
		errs = append(errs, errors.New("coordinator stopped"))
	}
	if d := now.Sub(h.attempted); h.electing && d > 2*h.leaseDuration {
		errs = append(errs, fmt.Errorf("leader election: no attempt completed for %s", d.Round(time.Second)))
	}
	if d := now.Sub(h.leadingSince); h.leading && !h.synced && d > 5*time.Minute {
		errs = append(errs, fmt.Errorf("caches not synced %s after leadership began", d.Round(time.Second)))
	}
	if d := now.Sub(h.ticked); h.leading && h.synced && d > 3*h.resync+30*time.Second {
		errs = append(errs, fmt.Errorf("reconcile loop: no resync for %s", d.Round(time.Second)))
	}
	if d := now.Sub(h.busySince); h.leading && !h.busySince.IsZero() && d > reconcileTimeout+30*time.Second {
		errs = append(errs, fmt.Errorf("reconcile loop: one reconcile running for %s", d.Round(time.Second)))
	}
	return errors.Join(errs...)
}

// ServeReadyz answers /readyz from Ready, naming the Role.
func (h *Progress) ServeReadyz(w http.ResponseWriter, _ *http.Request) { h.serve(w, h.Ready()) }

// ServeHealthz answers /healthz from Live, naming the Role.
func (h *Progress) ServeHealthz(w http.ResponseWriter, _ *http.Request) { h.serve(w, h.Live()) }

func (h *Progress) serve(w http.ResponseWriter, err error) {
	if err != nil {
		http.Error(w, h.Role()+": "+err.Error(), http.StatusServiceUnavailable)
		return
	}
	_, _ = w.Write([]byte("ok: " + h.Role() + "\n"))
}

func (h *Progress) update(f func(h *Progress)) {
	if h == nil {
		return
	}
	h.mu.Lock()
	defer h.mu.Unlock()
	f(h)
}

func (h *Progress) electionStarted(leaseDuration time.Duration) {
	h.update(func(h *Progress) {
		h.electing, h.stopped, h.leaseDuration, h.attempted = true, false, leaseDuration, h.now()
	})
}

func (h *Progress) electionAttempted() { h.update(func(h *Progress) { h.attempted = h.now() }) }

func (h *Progress) electionStopped() {
	h.update(func(h *Progress) { h.electing, h.stopped = false, true })
}

func (h *Progress) runStarted(resync time.Duration) {
	h.update(func(h *Progress) {
		h.leading, h.synced, h.stopped, h.resync, h.leadingSince = true, false, false, resync, h.now()
	})
}

func (h *Progress) cachesSynced() {
	h.update(func(h *Progress) { h.synced, h.ticked = true, h.now() })
}

func (h *Progress) tick() { h.update(func(h *Progress) { h.ticked = h.now() }) }

func (h *Progress) busy(on bool) {
	h.update(func(h *Progress) {
		h.busySince = time.Time{}
		if on {
			h.busySince = h.now()
		}
	})
}

// runStopped marks the end of a Controller's Run; without election the
// coordinator is then stopped.
func (h *Progress) runStopped() {
	h.update(func(h *Progress) {
		h.leading, h.synced, h.busySince = false, false, time.Time{}
		h.stopped = h.stopped || !h.electing
	})
}
