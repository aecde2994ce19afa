package daemon

import (
	"fmt"
	"sort"
	"strings"
	"sync"
	"time"
)

// Liveness knows whether the agent's loops still turn. Each loop beats on
// every turn; a loop is alive while its last beat is recent enough for its
// cadence, or while it is busy in an action that bounds itself (an
// rpm-ostree call has its own timeout: a download may take an hour, and the
// agent must never be restarted in the middle of one). The systemd watchdog
// pings and /livez follow it, so a restart by systemd means a wedged loop.
type Liveness struct {
	now func() time.Time

	mu    sync.Mutex
	loops map[string]*loopBeat
}

type loopBeat struct {
	last      time.Time
	busySince time.Time // zero when not busy
	within    time.Duration
	busyLimit time.Duration
}

// NewLiveness uses now as its clock (time.Now when nil).
func NewLiveness(now func() time.Time) *Liveness {
	if now == nil {
		now = time.Now
	}
	return &Liveness{now: now, loops: map[string]*loopBeat{}}
}

// Register adds a loop that beats at least every within while it waits,
// and may stay busy in one action for up to busyLimit. It returns the
// loop's beat: beat(true) as an action starts, beat(false) when it ends
// and on every idle turn.
func (l *Liveness) Register(name string, within, busyLimit time.Duration) func(busy bool) {
	l.mu.Lock()
	defer l.mu.Unlock()
	b := &loopBeat{last: l.now(), within: within, busyLimit: busyLimit}
	l.loops[name] = b
	return func(busy bool) {
		l.mu.Lock()
		defer l.mu.Unlock()
		now := l.now()
		b.last = now
		switch {
		case busy && b.busySince.IsZero():
			b.busySince = now
		case !busy:
			b.busySince = time.Time{}
		}
	}
}

// Alive reports whether every loop is alive; the reason names the ones
// that are not.
func (l *Liveness) Alive() (bool, string) {
	l.mu.Lock()
	defer l.mu.Unlock()
	now := l.now()
	var stuck []string
	for name, b := range l.loops {
		switch {
		case !b.busySince.IsZero() && now.Sub(b.busySince) > b.busyLimit:
			stuck = append(stuck, fmt.Sprintf("%s: busy in one action for %s (limit %s)", name, now.Sub(b.busySince).Round(time.Second), b.busyLimit))
		case b.busySince.IsZero() && now.Sub(b.last) > b.within:
			stuck = append(stuck, fmt.Sprintf("%s: no turn for %s (expected every %s)", name, now.Sub(b.last).Round(time.Second), b.within))
		}
	}
	if len(stuck) > 0 {
		sort.Strings(stuck)
		return false, strings.Join(stuck, "; ")
	}
	return true, "ok"
}
