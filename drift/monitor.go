package drift

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"sync"
	"sync/atomic"
	"time"

	"golang.org/x/sys/unix"
	"k8s.io/utils/clock"

	"github.com/nodeward/nodeward/machineconfig"
)

// Defaults of Options.
const (
	// DefaultDebounce coalesces the burst of events one edit makes (an
	// editor's write, rename and chmod) into one re-check.
	DefaultDebounce = 100 * time.Millisecond
	// DefaultInterval is the safety net's period: what inotify cannot see
	// (a link added to a .wants directory the config does not name, a
	// directory past MaxWatches, a lost event) is found within it.
	DefaultInterval = 10 * time.Minute
	// DefaultMaxWatches bounds the inotify watches of one Monitor. A
	// rendered MachineConfig of OpenShift 4.x writes about 60 files and 30
	// units in some 30 directories; 256 leaves room for eight times as
	// many, far below the kernel's fs.inotify.max_user_watches (8,192 at
	// the least, shared by the user's processes). A Monitor holds one
	// inotify instance (of max_user_instances, 128 by default).
	DefaultMaxWatches = 256
)

// Checker is what the Monitor re-checks with; machineconfig.Writer is one.
type Checker interface {
	// Drift returns the first path of cfg not on disk as cfg says, or nil.
	Drift(cfg *machineconfig.Config) (*machineconfig.DriftError, error)
	// Paths lists the on-disk paths Drift checks.
	Paths(cfg *machineconfig.Config) ([]string, error)
}

// Report is one change of the drift state, in the order found.
type Report struct {
	// Drift is the first drifted path and the MCD's message for it; nil
	// when the drift reported before is gone (the path put back).
	Drift *machineconfig.DriftError
	// At is the clock's time of the re-check that found it.
	At time.Time
}

// Options configure a Monitor.
type Options struct {
	// Checker and Config are required: what to check, against what.
	Checker Checker
	Config  *machineconfig.Config
	// OnReport is called, from Run's goroutine, for each Report: drift
	// found, drift changed (another path or message), drift gone. Drift
	// present at the start is reported; a clean start reports nothing.
	// Required.
	OnReport func(context.Context, Report)
	// Debounce is how long after the first event of a burst the re-check
	// runs; DefaultDebounce when zero.
	Debounce time.Duration
	// Interval is the period of the full re-check without an event;
	// DefaultInterval when zero.
	Interval time.Duration
	// MaxWatches bounds the directories watched; DefaultMaxWatches when
	// zero.
	MaxWatches int
	// Clock times the debounce and the periodic re-check;
	// clock.RealClock when nil.
	Clock clock.WithTicker
	// Log is where the Monitor logs; slog.Default() when nil.
	Log *slog.Logger
}

// Monitor watches the files and units of one config for drift, as the
// machine-config-daemon's Config Drift Monitor does: inotify on the parent
// directories of the config's paths, a re-check of the whole config when
// one of its paths changes. It holds no state between runs: to follow a
// new config, cancel Run's context, wait for Run to return, and run a
// Monitor made for the new config.
type Monitor struct {
	opts    Options
	running atomic.Bool
}

// New checks opts and fills in the defaults.
func New(opts Options) (*Monitor, error) {
	switch {
	case opts.Checker == nil:
		return nil, errors.New("drift: no Checker")
	case opts.Config == nil:
		return nil, errors.New("drift: no Config")
	case opts.OnReport == nil:
		return nil, errors.New("drift: no OnReport")
	case opts.Debounce < 0 || opts.Interval < 0 || opts.MaxWatches < 0:
		return nil, errors.New("drift: negative Debounce, Interval or MaxWatches")
	}
	opts.Debounce = orDefault(opts.Debounce, DefaultDebounce)
	opts.Interval = orDefault(opts.Interval, DefaultInterval)
	opts.MaxWatches = orDefault(opts.MaxWatches, DefaultMaxWatches)
	if opts.Clock == nil {
		opts.Clock = clock.RealClock{}
	}
	if opts.Log == nil {
		opts.Log = slog.Default()
	}
	opts.Log = opts.Log.With("config", opts.Config.Name)
	return &Monitor{opts: opts}, nil
}

func orDefault[T time.Duration | int](v, def T) T {
	if v == 0 {
		return def
	}
	return v
}

// Run checks the config, then watches it until ctx ends, when it returns
// nil with its watches and goroutine gone. It fails only when it cannot
// watch (no inotify instance, a watch refused, the events unreadable); a
// check that fails is logged and retried at the next event or period.
func (m *Monitor) Run(ctx context.Context) error {
	if !m.running.CompareAndSwap(false, true) {
		return errors.New("drift: Run is already running")
	}
	defer m.running.Store(false)
	in, err := newInotify()
	if err != nil {
		return err
	}
	events, readErr, quit := make(chan []rawEvent), make(chan error, 1), make(chan struct{})
	var wg sync.WaitGroup
	wg.Add(1)
	go func() { defer wg.Done(); readLoop(in, events, readErr, quit) }()
	// However Run ends, the reader stops: quit unblocks a send, the
	// closed instance a read.
	defer func() { close(quit); in.close(); wg.Wait() }()

	// The ticker starts before the first check: a test's fake clock can
	// step it as soon as the first check has run.
	tick := m.opts.Clock.NewTicker(m.opts.Interval)
	defer tick.Stop()
	r := &run{m: m, in: in}
	m.opts.Log.Info("config drift monitor started", "interval", m.opts.Interval)
	defer m.opts.Log.Info("config drift monitor stopped")
	if err := r.check(ctx); err != nil {
		return err
	}
	return r.loop(ctx, tick.C(), events, readErr)
}

// readLoop hands each batch of events to Run's goroutine until the
// instance is closed or quit is.
func readLoop(in *inotify, events chan<- []rawEvent, readErr chan<- error, quit <-chan struct{}) {
	buf := make([]byte, 64*(unix.SizeofInotifyEvent+unix.NAME_MAX+1))
	for {
		evs, err := in.readEvents(buf)
		if err != nil {
			readErr <- err
			return
		}
		select {
		case events <- evs:
		case <-quit:
			return
		}
	}
}

// run is the state of one Run: the watches, what they cover, and the
// drift last reported.
type run struct {
	m       *Monitor
	in      *inotify
	targets targets
	last    *machineconfig.DriftError
}

func (r *run) loop(ctx context.Context, tick <-chan time.Time, events <-chan []rawEvent, readErr <-chan error) error {
	o := r.m.opts
	var debounce clock.Timer
	defer func() {
		if debounce != nil {
			debounce.Stop()
		}
	}()
	var due <-chan time.Time
	for {
		select {
		case <-ctx.Done():
			return nil
		case err := <-readErr:
			if ctx.Err() != nil {
				return nil
			}
			return fmt.Errorf("drift: read inotify events: %w", err)
		case evs := <-events:
			if due == nil && r.relevant(evs) {
				debounce = o.Clock.NewTimer(o.Debounce)
				due = debounce.C()
			}
		case <-due:
			due = nil
			if err := r.check(ctx); err != nil {
				return err
			}
		case <-tick:
			if err := r.check(ctx); err != nil {
				return err
			}
		}
	}
}

// relevant reports whether a batch touches a path of the config or one of
// its ancestors, or lost events (queue overflow).
func (r *run) relevant(evs []rawEvent) bool {
	for _, ev := range evs {
		if ev.mask&unix.IN_Q_OVERFLOW != 0 {
			return true
		}
		if p := r.in.path(ev); p != "" && r.targets.interesting[p] {
			return true
		}
	}
	return false
}
