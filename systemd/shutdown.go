package systemd

import (
	"context"
	"log/slog"
	"os"
	"os/signal"
	"sync"
	"syscall"
	"time"
)

// Shutdown turns SIGTERM/SIGINT into the cancellation of the agent's
// context, except that a critical step in flight (a finalize) is first
// allowed to end, for at most MaxWait, so that an update is never cut in
// half.
type Shutdown struct {
	MaxWait  time.Duration
	Notifier *Notifier // optional: STOPPING=1 when the signal arrives
	Log      *slog.Logger

	mu       sync.Mutex
	inFlight int
	idle     chan struct{} // closed while inFlight == 0
}

// Critical runs step with ctx's values but without its cancellation, so
// that the shutdown signal does not cut it; the step must bound itself
// (osupdate's calls all have timeouts). Shutdown waits for it.
func (s *Shutdown) Critical(ctx context.Context, step func(context.Context) error) error {
	s.mu.Lock()
	if s.inFlight == 0 {
		s.idle = make(chan struct{})
	}
	s.inFlight++
	s.mu.Unlock()
	defer func() {
		s.mu.Lock()
		s.inFlight--
		if s.inFlight == 0 {
			close(s.idle)
		}
		s.mu.Unlock()
	}()
	return step(context.WithoutCancel(ctx))
}

// Wait blocks until no critical step runs or maxWait passes, and tells
// which.
func (s *Shutdown) Wait(maxWait time.Duration) (finished bool) {
	s.mu.Lock()
	idle := s.idle
	busy := s.inFlight > 0
	s.mu.Unlock()
	if !busy {
		return true
	}
	t := time.NewTimer(maxWait)
	defer t.Stop()
	select {
	case <-idle:
		return true
	case <-t.C:
		return false
	}
}

// Context returns a context cancelled when SIGTERM or SIGINT arrives and
// the in-flight critical step (if any) ended or MaxWait passed.
func (s *Shutdown) Context(parent context.Context) (context.Context, context.CancelFunc) {
	ctx, cancel := context.WithCancel(parent)
	sigs := make(chan os.Signal, 1)
	signal.Notify(sigs, syscall.SIGTERM, syscall.SIGINT)
	go func() {
		defer signal.Stop(sigs)
		select {
		case <-ctx.Done():
			return
		case sig := <-sigs:
			if s.Notifier != nil {
				s.Notifier.Stopping()
			}
			if !s.Wait(s.MaxWait) && s.Log != nil {
				s.Log.Warn("critical step still running at shutdown deadline", "signal", sig.String(), "maxWait", s.MaxWait)
			}
			cancel()
		}
	}()
	return ctx, cancel
}
