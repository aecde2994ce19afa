package daemon

import (
	"context"
	"fmt"
	"log/slog"
	"net/http"
	"strings"
	"sync"
	"time"
)

// Notifier sends sd_notify(3) messages ("READY=1", "STATUS=..."); the
// systemd package's Notifier is the one to use.
type Notifier interface {
	Notify(state string) error
}

// ReadyCheck reports whether one part of the agent is ready and, if not,
// why.
type ReadyCheck func() (ok bool, reason string)

// Readiness combines the agent's ready checks: it serves /readyz, sends
// READY=1 once every check passed for the first time, and forwards status
// lines as STATUS=. It implements StatusSink.
type Readiness struct {
	Notifier Notifier
	Log      *slog.Logger

	mu     sync.Mutex
	checks map[string]ReadyCheck
	ready  bool // READY=1 sent
}

// Add registers a named check.
func (r *Readiness) Add(name string, check ReadyCheck) {
	r.mu.Lock()
	defer r.mu.Unlock()
	if r.checks == nil {
		r.checks = map[string]ReadyCheck{}
	}
	r.checks[name] = check
}

// SyncedCheck turns a channel closed at the first sync into a ReadyCheck.
func SyncedCheck(synced <-chan struct{}) ReadyCheck {
	return func() (bool, string) {
		select {
		case <-synced:
			return true, "synced"
		default:
			return false, "first sync not done"
		}
	}
}

// Ready runs every check; the reason lists the failing ones.
func (r *Readiness) Ready() (bool, string) {
	r.mu.Lock()
	defer r.mu.Unlock()
	var failing []string
	for name, check := range r.checks {
		if ok, reason := check(); !ok {
			failing = append(failing, name+": "+reason)
		}
	}
	if len(failing) > 0 {
		return false, strings.Join(failing, "; ")
	}
	return true, "ready"
}

// ServeHTTP answers /readyz: 200 when ready, 503 with the reasons otherwise.
func (r *Readiness) ServeHTTP(w http.ResponseWriter, _ *http.Request) {
	ok, reason := r.Ready()
	if !ok {
		w.WriteHeader(http.StatusServiceUnavailable)
	}
	fmt.Fprintln(w, reason)
}

// Run sends READY=1 once all checks pass, polling every interval until
// then, and returns (READY=1 is sent once per process).
func (r *Readiness) Run(ctx context.Context, interval time.Duration) {
	for {
		if ok, _ := r.Ready(); ok {
			r.notify("READY=1")
			r.mu.Lock()
			r.ready = true
			r.mu.Unlock()
			return
		}
		select {
		case <-ctx.Done():
			return
		case <-time.After(interval):
		}
	}
}

// Status implements StatusSink: the line becomes systemd's STATUS=.
func (r *Readiness) Status(line string) {
	r.notify("STATUS=" + strings.ReplaceAll(line, "\n", " "))
}

func (r *Readiness) notify(state string) {
	if r.Notifier == nil {
		return
	}
	if err := r.Notifier.Notify(state); err != nil && r.Log != nil {
		r.Log.Warn("notify the service manager", "err", err)
	}
}
