package mco

// The config drift monitor between updates, as the daemon runs it.

import (
	"context"
	"fmt"
	"log/slog"
	"sync"

	"github.com/nodeward/nodeward/drift"
	"github.com/nodeward/nodeward/machineconfig"
)

// DriftWatch runs a drift.Monitor against the config the node runs while
// it is Done on it, as the daemon runs its Config Drift Monitor between
// updates, and stops it while an update writes the host. Drift is
// reported as the daemon reports it: the node Degraded with the drifted
// path's message and a ConfigDriftDetected Event; unlike the daemon, the
// path put back clears it without waiting for a resync.
type DriftWatch struct {
	Files    machineconfig.Writer
	Configs  ConfigSource
	Protocol *Protocol
	// Events records an Event about the node; nil records none.
	Events func(ctx context.Context, warning bool, reason, message string)
	// Monitor tunes each drift.Monitor (its Checker, Config and OnReport
	// are set here).
	Monitor drift.Options
	Log     *slog.Logger

	once    sync.Once
	configs chan string
}

// Watch asks for config to be watched ("" stops watching). Only the latest
// request counts; it never blocks.
func (w *DriftWatch) Watch(config string) {
	w.init()
	for {
		select {
		case w.configs <- config:
			return
		default:
		}
		select {
		case <-w.configs: // replaced by the newer request
		default:
		}
	}
}

func (w *DriftWatch) init() {
	w.once.Do(func() { w.configs = make(chan string, 1) })
}

// Run serves Watch's requests until ctx ends.
func (w *DriftWatch) Run(ctx context.Context) error {
	w.init()
	var watching string
	stop := func() {}
	defer func() { stop() }()
	for {
		select {
		case <-ctx.Done():
			return nil
		case config := <-w.configs:
			if config == watching {
				continue
			}
			stop()
			stop, watching = func() {}, config
			if config == "" {
				continue
			}
			var err error
			if stop, err = w.start(ctx, config); err != nil {
				// The next report of Done asks again.
				w.Log.Warn("cannot watch the config for drift", "config", config, "err", err)
				stop, watching = func() {}, ""
			}
		}
	}
}

// start runs a Monitor for config; the function it returns stops it and
// waits for it.
func (w *DriftWatch) start(ctx context.Context, config string) (func(), error) {
	cfg, err := w.Configs.Get(ctx, config)
	if err != nil {
		return nil, fmt.Errorf("read config %s: %w", config, err)
	}
	opts := w.Monitor
	opts.Checker, opts.Config, opts.Log = w.Files, cfg, w.Log
	opts.OnReport = func(ctx context.Context, r drift.Report) { w.report(ctx, config, r) }
	m, err := drift.New(opts)
	if err != nil {
		return nil, err
	}
	mctx, cancel := context.WithCancel(ctx)
	done := make(chan struct{})
	go func() {
		defer close(done)
		if err := m.Run(mctx); err != nil {
			w.Log.Warn("the config drift monitor stopped", "config", config, "err", err)
		}
	}()
	w.Log.Info("config drift monitor started", "config", config)
	return func() { cancel(); <-done }, nil
}

func (w *DriftWatch) report(ctx context.Context, config string, r drift.Report) {
	if r.Drift == nil {
		w.Log.Info("config drift gone", "config", config)
		if err := w.Protocol.DriftGone(ctx); err != nil {
			w.Log.Warn("cannot report the config drift gone", "err", err)
		}
		return
	}
	w.Log.Error("config drift", "config", config, "path", r.Drift.Path, "drift", r.Drift.Message)
	if w.Events != nil {
		w.Events(ctx, true, "ConfigDriftDetected", r.Drift.Message)
	}
	if err := w.Protocol.Drifted(ctx, r.Drift.Message); err != nil {
		w.Log.Warn("cannot report the config drift", "err", err)
	}
}
