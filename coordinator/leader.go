package coordinator

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"time"

	coordinationv1 "k8s.io/api/coordination/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/utils/ptr"

	"github.com/nodeward/nodeward/api/kube"
	"github.com/nodeward/nodeward/api/v1alpha1"
)

// LeaderLeaseName is the coordination.k8s.io Lease the coordinators elect
// a leader on; RBAC limits the coordinator's Lease updates to this name.
const LeaderLeaseName = "nodeward-coordinator"

// LeaderConfig configure leader election.
type LeaderConfig struct {
	Namespace string
	Identity  string
	// LeaseDuration, RenewDeadline and RetryPeriod as in client-go; zero
	// values default to 15 s, 10 s and 2 s.
	LeaseDuration, RenewDeadline, RetryPeriod time.Duration
	// SyncWarningInterval: how long the Lease may stay unreachable (API
	// errors, not another holder) before a warning; it repeats with
	// backoff. Config.SyncWarningInterval, then kube.DefaultStallInterval,
	// when zero.
	SyncWarningInterval time.Duration
}

// RunWithLeaderElection runs a fresh Controller each time this replica
// becomes leader and stops it when leadership is lost. A new leader builds
// its caches from a fresh list, so it sees every grant its predecessor
// wrote before it grants anything. It returns when leadership is lost (nil)
// or ctx ends (ctx's error).
func RunWithLeaderElection(ctx context.Context, opts Config, le LeaderConfig) error {
	if le.SyncWarningInterval == 0 {
		le.SyncWarningInterval = opts.SyncWarningInterval
	}
	return runLeading(ctx, opts.Client, le, opts.Log, opts.Progress, func(ctx context.Context, term v1alpha1.LeaderTerm) {
		opts := opts
		opts.LeaderTerm = &term // the fencing token of this leadership's grants
		if err := New(opts).Run(ctx); err != nil && opts.Log != nil {
			opts.Log.Error("coordinator stopped", "err", err)
		}
	})
}

// RunLeading waits until this replica holds the leader Lease, runs lead
// with a context that ends when leadership ends, and returns once lead has
// returned: ctx's error when ctx ended, nil when leadership was lost or
// lead returned on its own (then the Lease is released for the others).
//
// The election follows client-go's leaderelection on a Lease, which
// nodeward cannot import: its resource lock links client-go's scheme of
// every API group (see package kube). The rules are the same: a Lease held
// by someone else is taken over only after LeaseDuration has passed on this
// replica's clock since the Lease last changed, so clock skew between
// replicas does not matter; every write carries the resourceVersion it was
// based on, so of two contenders exactly one wins; a leader that cannot
// renew within RenewDeadline stops leading, well before the others may
// take over; and a leader that shuts down releases the Lease, after lead
// has returned.
func RunLeading(ctx context.Context, client *kube.Client, le LeaderConfig, log *slog.Logger, lead func(context.Context)) error {
	return runLeading(ctx, client, le, log, nil, func(ctx context.Context, _ v1alpha1.LeaderTerm) { lead(ctx) })
}

// runLeading is RunLeading reporting to progress (nil: nowhere), passing
// lead the term of the leadership it runs in.
func runLeading(ctx context.Context, client *kube.Client, le LeaderConfig, log *slog.Logger, progress *Progress,
	lead func(context.Context, v1alpha1.LeaderTerm)) error {
	if le.LeaseDuration == 0 {
		le.LeaseDuration, le.RenewDeadline, le.RetryPeriod = 15*time.Second, 10*time.Second, 2*time.Second
	}
	if le.RenewDeadline >= le.LeaseDuration || le.RetryPeriod <= 0 || le.RetryPeriod >= le.RenewDeadline {
		return fmt.Errorf("leader election: need 0 < retry period (%v) < renew deadline (%v) < lease duration (%v)",
			le.RetryPeriod, le.RenewDeadline, le.LeaseDuration)
	}
	if log == nil {
		log = slog.New(slog.DiscardHandler)
	}
	e := &elector{opts: le, leases: client.Leases(le.Namespace), progress: progress,
		stall: &kube.StallWarner{Log: log, Server: client.Host(), What: "leader Lease " + le.Namespace + "/" + LeaderLeaseName,
			Interval: le.SyncWarningInterval}}
	progress.electionStarted(le.LeaseDuration)
	defer progress.electionStopped()
	if !e.acquire(ctx) {
		return ctx.Err()
	}
	term := v1alpha1.TermOf(e.observed) // the Lease as this replica wrote it on acquiring
	log.Info("became leader", "identity", le.Identity, "term", term.Transitions)
	leading, stopLeading := context.WithCancel(ctx)
	done := make(chan struct{})
	go func() {
		defer close(done)
		lead(leading, term)
	}()
	lost := !e.renew(ctx, done)
	stopLeading()
	<-done
	log.Info("leadership ended", "identity", le.Identity, "lost", lost)
	if !lost {
		// On shutdown, or when lead gave up on its own, release the Lease
		// so that another replica takes over at once instead of after a
		// whole lease duration. lead has returned, so nothing of ours
		// writes after the release.
		rctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), le.RetryPeriod)
		defer cancel()
		if err := e.release(rctx); err != nil {
			log.Error("release leader Lease", "err", err)
		}
	}
	return ctx.Err()
}

// elector is one replica's view of the leader Lease.
type elector struct {
	opts   LeaderConfig
	leases *kube.LeaseClient
	// observed is the Lease as last read or written, and observedAt when
	// this replica saw it change: expiry is judged on the local clock.
	observed   *coordinationv1.Lease
	observedAt time.Time
	progress   *Progress
	// stall warns while the Lease cannot be read; lastErr is the last
	// read's error.
	stall   *kube.StallWarner
	lastErr error
}

// acquire tries every RetryPeriod until this replica holds the Lease or
// ctx ends.
func (e *elector) acquire(ctx context.Context) bool {
	t := time.NewTicker(e.opts.RetryPeriod)
	defer t.Stop()
	for {
		acquired := e.tryAcquireOrRenew(ctx)
		if e.lastErr != nil && !acquired {
			e.stall.Observe(e.lastErr)
			e.stall.Pending(time.Now())
		} else {
			e.stall.Reached(time.Now(), false)
		}
		if acquired {
			return true
		}
		select {
		case <-ctx.Done():
			return false
		case <-t.C:
		}
	}
}

// renew keeps the Lease until ctx ends or stop closes (true), or until
// renewals have failed for RenewDeadline (false: leadership lost).
func (e *elector) renew(ctx context.Context, stop <-chan struct{}) bool {
	t := time.NewTicker(e.opts.RetryPeriod)
	defer t.Stop()
	lastRenew := time.Now()
	for {
		select {
		case <-ctx.Done():
			return true
		case <-stop:
			return true
		case <-t.C:
		}
		attempt, cancel := context.WithDeadline(ctx, lastRenew.Add(e.opts.RenewDeadline))
		ok := e.tryAcquireOrRenew(attempt)
		cancel()
		switch {
		case ok:
			lastRenew = time.Now()
		case ctx.Err() != nil:
			return true
		case time.Since(lastRenew) >= e.opts.RenewDeadline:
			return false
		}
	}
}

// tryAcquireOrRenew creates, takes over or renews the Lease; false when
// someone else holds it or the write lost a race.
func (e *elector) tryAcquireOrRenew(ctx context.Context) bool {
	defer e.progress.electionAttempted()
	now := metav1.NewMicroTime(time.Now())
	spec := coordinationv1.LeaseSpec{
		HolderIdentity:       ptr.To(e.opts.Identity),
		LeaseDurationSeconds: ptr.To(int32(e.opts.LeaseDuration / time.Second)),
		AcquireTime:          &now,
		RenewTime:            &now,
		LeaseTransitions:     ptr.To(int32(0)),
	}
	if e.observed != nil && ptr.Deref(e.observed.Spec.HolderIdentity, "") == e.opts.Identity {
		// A leader renews on its own last write, one request per period;
		// a conflict sends it down the full path below.
		next := e.observed.DeepCopy()
		next.Spec.RenewTime = &now
		if updated, err := e.leases.Update(ctx, next, metav1.UpdateOptions{}); err == nil {
			e.observe(updated, now.Time)
			return true
		}
	}
	cur, err := e.leases.Get(ctx, LeaderLeaseName, metav1.GetOptions{})
	e.lastErr = err
	if apierrors.IsNotFound(err) {
		e.lastErr = nil
	}
	if apierrors.IsNotFound(err) {
		created, err := e.leases.Create(ctx, &coordinationv1.Lease{
			ObjectMeta: metav1.ObjectMeta{Name: LeaderLeaseName, Namespace: e.opts.Namespace}, Spec: spec,
		}, metav1.CreateOptions{})
		if err != nil {
			return false
		}
		e.observe(created, now.Time)
		return true
	}
	if err != nil {
		return false
	}
	if e.observed == nil || e.observed.ResourceVersion != cur.ResourceVersion {
		e.observe(cur, now.Time)
	}
	holder := ptr.Deref(cur.Spec.HolderIdentity, "")
	leading := holder == e.opts.Identity
	if holder != "" && !leading && now.Time.Before(e.observedAt.Add(e.leaseDuration(cur))) {
		return false
	}
	transitions := ptr.Deref(cur.Spec.LeaseTransitions, 0)
	if leading {
		spec.AcquireTime = cur.Spec.AcquireTime
	} else {
		transitions++
	}
	spec.LeaseTransitions = ptr.To(transitions)
	next := cur.DeepCopy()
	next.Spec = spec
	updated, err := e.leases.Update(ctx, next, metav1.UpdateOptions{})
	if err != nil {
		return false
	}
	e.observe(updated, now.Time)
	return true
}

// leaseDuration is the holder's declared duration, or ours when it set
// none.
func (e *elector) leaseDuration(l *coordinationv1.Lease) time.Duration {
	if s := ptr.Deref(l.Spec.LeaseDurationSeconds, 0); s > 0 {
		return time.Duration(s) * time.Second
	}
	return e.opts.LeaseDuration
}

func (e *elector) observe(l *coordinationv1.Lease, at time.Time) {
	e.observed, e.observedAt = l, at
}

// release empties the holder if this replica still holds the Lease, with
// a one-second duration, as client-go does.
func (e *elector) release(ctx context.Context) error {
	if e.observed == nil || ptr.Deref(e.observed.Spec.HolderIdentity, "") != e.opts.Identity {
		return nil
	}
	next := e.observed.DeepCopy()
	now := metav1.NewMicroTime(time.Now())
	next.Spec.HolderIdentity = nil
	next.Spec.LeaseDurationSeconds = ptr.To(int32(1))
	next.Spec.RenewTime, next.Spec.AcquireTime = &now, &now
	_, err := e.leases.Update(ctx, next, metav1.UpdateOptions{})
	if apierrors.IsConflict(err) {
		return errors.New("the Lease changed since our last renewal; left as it is")
	}
	return err
}
