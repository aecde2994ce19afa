// Package coordinatortest runs nodeward's coordinator inside a test
// process, confined to the test's own pools, so that the tests of a package
// can share one control plane (test/cluster) and each coordinate only what
// it created. It is the one place tests construct the coordinator: a change
// of coordinator.Config is made here, not in every test.
//
// It lives apart from test/cluster because that package is imported by the
// agent's own tests (daemon, drain, api/kube), which must link nothing of
// the coordinator.
package coordinatortest

import (
	"context"
	"io"
	"log/slog"
	"sync"
	"testing"
	"time"

	"k8s.io/client-go/dynamic"

	"github.com/nodeward/nodeward/coordinator"
	"github.com/nodeward/nodeward/test/cluster"
)

// PoolLabel tells apart the pools of tests sharing a control plane: a test
// labels its pools PoolLabel=<name> (PoolLabels) and starts its
// coordinator with Options.Pools = <name>.
const PoolLabel = "nodeward.test/pool"

// PoolLabels are the labels that put a pool under the coordinator started
// with Options.Pools = name.
func PoolLabels(name string) map[string]string { return map[string]string{PoolLabel: name} }

// Options say how a test's coordinator runs; zero values are the
// coordinator's defaults.
type Options struct {
	// Pools is the PoolLabel value of the pools this coordinator manages.
	// Required: two coordinators must never share a pool.
	Pools string
	// Resync is how often the coordinator re-plans without an event.
	Resync time.Duration
	// DisableGuard keeps this coordinator from publishing the disruption
	// guard, which one coordinator per cluster publishes.
	DisableGuard bool
	// Log receives the coordinator's log; nil discards it.
	Log *slog.Logger
}

// Start runs the coordinator against cp for the pools labelled
// PoolLabel=opts.Pools until stop is called or the test ends. stop cancels
// the run without a hand-over (to the cluster, a crash) and returns once
// the coordinator has returned; later calls do nothing. An error of the
// coordinator before it is stopped fails the test.
func Start(t testing.TB, cp *cluster.ControlPlane, opts Options) (stop func()) {
	t.Helper()
	if opts.Pools == "" {
		t.Fatal("coordinatortest: Options.Pools is required, or the coordinator would take every test's pools")
	}
	if opts.Log == nil {
		opts.Log = slog.New(slog.NewTextHandler(io.Discard, nil))
	}
	dyn, err := dynamic.NewForConfig(cp.Config())
	if err != nil {
		t.Fatalf("coordinatortest: dynamic client for pools %s: %v", opts.Pools, err)
	}
	c := coordinator.New(coordinator.Config{Client: cp.Kube(), Dynamic: dyn, Log: opts.Log,
		Resync: opts.Resync, DisableGuard: opts.DisableGuard,
		PoolLabelSelector: PoolLabel + "=" + opts.Pools})
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan struct{})
	go func() {
		defer close(done)
		if err := c.Run(ctx); err != nil && ctx.Err() == nil {
			t.Errorf("coordinator of pools %s: %v", opts.Pools, err)
		}
	}()
	var once sync.Once
	stop = func() { once.Do(func() { cancel(); <-done }) }
	t.Cleanup(stop)
	return stop
}
