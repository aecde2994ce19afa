package coordinator

import (
	"context"
	"fmt"
	"time"

	"k8s.io/client-go/tools/leaderelection"
	"k8s.io/client-go/tools/leaderelection/resourcelock"
)

// LeaderLeaseName is the coordination.k8s.io Lease the coordinators elect
// a leader on; RBAC limits the coordinator's Lease updates to this name.
const LeaderLeaseName = "nodeward-coordinator"

// LeaderOptions configure leader election.
type LeaderOptions struct {
	Namespace string
	Identity  string
	// LeaseDuration, RenewDeadline and RetryPeriod as in client-go; zero
	// values default to 15 s, 10 s and 2 s.
	LeaseDuration, RenewDeadline, RetryPeriod time.Duration
}

// RunWithLeaderElection runs a fresh Controller each time this replica
// becomes leader and stops it when leadership is lost. A new leader builds
// its caches from a fresh list, so it sees every grant its predecessor
// wrote before it grants anything.
func RunWithLeaderElection(ctx context.Context, opts Options, le LeaderOptions) error {
	if le.LeaseDuration == 0 {
		le.LeaseDuration, le.RenewDeadline, le.RetryPeriod = 15*time.Second, 10*time.Second, 2*time.Second
	}
	lock, err := resourcelock.New(resourcelock.LeasesResourceLock, le.Namespace, LeaderLeaseName,
		opts.Client.CoreV1(), opts.Client.CoordinationV1(), resourcelock.ResourceLockConfig{Identity: le.Identity})
	if err != nil {
		return fmt.Errorf("leader lock: %w", err)
	}
	log := opts.Log
	elector, err := leaderelection.NewLeaderElector(leaderelection.LeaderElectionConfig{
		Lock:          lock,
		LeaseDuration: le.LeaseDuration,
		RenewDeadline: le.RenewDeadline,
		RetryPeriod:   le.RetryPeriod,
		// Releasing on shutdown lets the other replica take over at once
		// instead of after a whole lease duration.
		ReleaseOnCancel: true,
		Name:            LeaderLeaseName,
		Callbacks: leaderelection.LeaderCallbacks{
			OnStartedLeading: func(ctx context.Context) {
				if log != nil {
					log.Info("became leader", "identity", le.Identity)
				}
				if err := New(opts).Run(ctx); err != nil && log != nil {
					log.Error("coordinator stopped", "err", err)
				}
			},
			OnStoppedLeading: func() {
				if log != nil {
					log.Info("leadership lost", "identity", le.Identity)
				}
			},
		},
	})
	if err != nil {
		return fmt.Errorf("leader election: %w", err)
	}
	elector.Run(ctx)
	return ctx.Err()
}
