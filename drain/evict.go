package drain

import (
	"context"
	"fmt"
	"strings"
	"sync"
	"time"

	corev1 "k8s.io/api/core/v1"
	policyv1 "k8s.io/api/policy/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
)

// run is the state of one Drain call shared by its pod workers.
type run struct {
	d        *Drainer
	tracker  *podTracker
	blockers *blockerSet
	// pdbs wakes evictions refused by a budget when it allows again.
	pdbs *pdbWaker
	// timedOut is closed when the overall timeout passes; nil without one.
	timedOut <-chan struct{}

	mu  sync.Mutex
	res *Result
}

func (r *run) count(f func(*Result)) {
	r.mu.Lock()
	f(r.res)
	r.mu.Unlock()
}

// pod drives one pod until it is gone (or completed, for WaitCompleted):
// evict, retry refused evictions with backoff, wait on the watch, and apply
// the timeout policy once.
func (r *run) pod(ctx context.Context, pp PlannedPod) error {
	d := r.d
	ref := pp.Pod
	evicted := pp.Terminating || pp.Behavior == BehaviorWaitCompleted
	backoff := d.opts.RetryBackoff
	timedOut := r.timedOut
	var retry <-chan time.Time
	var budgetFree <-chan struct{}
	// turned: the retry due is the one after a budget's wake and this
	// drain's turn, so the budget's watch is live.
	turned := false
	for {
		// Take the change channel before reading the store, so that an
		// event between the two still wakes us.
		changed := r.tracker.wait()
		pod := r.tracker.get(ref)
		if pod == nil || (pp.Behavior == BehaviorWaitCompleted && finished(pod)) {
			r.blockers.clear(ref)
			d.progress(Progress{Kind: ProgressGone, Pod: ref})
			return nil
		}
		if !evicted && retry == nil {
			// Take the budgets' channel before the eviction (or the look
			// at the budget), so that a budget allowing again in between
			// still wakes the retry.
			pdbs := r.blockingPDBs(ref)
			budgetFree = r.pdbs.wake(pdbs)
			if turned && r.pdbs.exhausted(pdbs) {
				// Another drain took the disruption during this one's
				// turn: wait for the next rather than be refused. The
				// backoff's retry asks the server whatever the watch
				// says, in case the watch stalls.
				retry = time.After(backoff)
			} else {
				wait, err := r.evict(ctx, pod, &backoff)
				if err != nil {
					return err
				}
				if wait == 0 {
					evicted = true
					r.blockers.clear(ref)
					budgetFree = nil
				} else {
					retry = time.After(wait)
					if budgetFree == nil {
						budgetFree = r.pdbs.wake(r.blockingPDBs(ref))
					}
				}
			}
			turned = false
		}
		select {
		case <-ctx.Done():
			return ctx.Err()
		case <-changed:
		case <-retry:
			retry = nil
		case <-budgetFree:
			// Wait for the turn, so that drains which have waited
			// longer reach the server first (budgetQueue).
			retry, budgetFree = time.After(d.budgets.turn(time.Now())), nil
			turned = true
		case <-timedOut:
			timedOut = nil
			if err := r.onTimeout(ctx, pp, pod, &evicted); err != nil {
				return err
			}
		}
	}
}

// onTimeout applies the timeout policy to a pod still on the node.
func (r *run) onTimeout(ctx context.Context, pp PlannedPod, pod *corev1.Pod, evicted *bool) error {
	d := r.d
	if _, known := r.blockers.current(pp.Pod); !known {
		reason := BlockedTerminating
		if pp.Behavior == BehaviorWaitCompleted {
			reason = BlockedNotCompleted
		}
		r.blockers.set(Blocker{Pod: pp.Pod, Reason: reason})
	}
	d.progress(Progress{Kind: ProgressTimedOut, Pod: pp.Pod, Message: fmt.Sprintf(
		"still on the node after the %s timeout; policy %s", d.opts.Timeout, d.opts.OnTimeout)})
	switch d.opts.OnTimeout {
	case Yield, Fail:
		return ErrBlocked
	case Force:
		uid := pod.UID
		err := d.client.Pods(pod.Namespace).Delete(ctx, pod.Name, metav1.DeleteOptions{
			GracePeriodSeconds: d.opts.GracePeriod, Preconditions: &metav1.Preconditions{UID: &uid},
		})
		if err != nil && !ignorableGone(err) {
			return fmt.Errorf("force-delete pod %s: %w", pp.Pod, err)
		}
		*evicted = true
		r.count(func(res *Result) { res.Forced++ })
		d.metrics.eviction("forced")
		d.event(corev1.EventTypeWarning, "DrainForced", fmt.Sprintf(
			"pod %s deleted without eviction after the %s drain timeout (on-timeout force)", pp.Pod, d.opts.Timeout))
		d.progress(Progress{Kind: ProgressForced, Pod: pp.Pod, Message: "deleted without eviction (force)"})
	}
	return nil
}

// evict asks the Eviction API to evict pod once. It returns 0 when the pod
// is evicted or gone, or how long to wait before the next try when the
// eviction was refused; the refusal is recorded as a blocker.
func (r *run) evict(ctx context.Context, pod *corev1.Pod, backoff *time.Duration) (time.Duration, error) {
	d := r.d
	ref := refOf(pod)
	uid := pod.UID
	eviction := &policyv1.Eviction{
		ObjectMeta: metav1.ObjectMeta{Name: pod.Name, Namespace: pod.Namespace},
		DeleteOptions: &metav1.DeleteOptions{
			GracePeriodSeconds: d.opts.GracePeriod,
			// A same-named successor (StatefulSet) is not ours to evict.
			Preconditions: &metav1.Preconditions{UID: &uid},
		},
	}
	select {
	case d.evictSlots <- struct{}{}:
	case <-ctx.Done():
		return 0, ctx.Err()
	}
	var err error
	if d.opts.DisableEviction {
		err = d.client.Pods(pod.Namespace).Delete(ctx, pod.Name, *eviction.DeleteOptions)
	} else {
		err = d.client.Evict(ctx, eviction)
	}
	<-d.evictSlots
	switch {
	case err == nil && d.opts.DisableEviction:
		r.count(func(res *Result) { res.Forced++ })
		d.metrics.eviction("forced")
		d.progress(Progress{Kind: ProgressForced, Pod: ref, Message: "deleted without eviction (eviction disabled)"})
		return 0, nil
	case err == nil:
		r.count(func(res *Result) { res.Evicted++ })
		d.metrics.eviction("evicted")
		d.progress(Progress{Kind: ProgressEvicted, Pod: ref})
		return 0, nil
	case apierrors.IsNotFound(err):
		d.metrics.eviction("not_found")
		return 0, nil
	case apierrors.IsConflict(err):
		// Either the UID precondition failed (the watch will show the
		// pod gone) or the PDB changed under the eviction: look again.
		return conflictRetry, nil
	case apierrors.IsTooManyRequests(err):
		d.metrics.eviction("blocked_pdb")
		d.budgets.refused(time.Now())
		pdbs, perr := pdbsFor(ctx, d.client, pod)
		detail := err.Error()
		if perr != nil {
			detail += " (" + perr.Error() + ")"
		}
		r.blockers.set(Blocker{Pod: ref, Reason: BlockedByPDB, PDBs: pdbs, Detail: detail})
		return nextWait(err, backoff, d.opts.MaxRetryBackoff), nil
	case apierrors.IsInternalError(err) && strings.Contains(err.Error(), "more than one PodDisruptionBudget"):
		// Retrying does not help until someone fixes the PDBs: report,
		// and look again only at the slowest pace.
		d.metrics.eviction("multiple_pdbs")
		pdbs, _ := pdbsFor(ctx, d.client, pod)
		r.blockers.set(Blocker{Pod: ref, Reason: BlockedByMultiplePDBs, PDBs: pdbs, Detail: err.Error()})
		return d.opts.MaxRetryBackoff, nil
	case ctx.Err() != nil:
		return 0, ctx.Err()
	default:
		d.metrics.eviction("error")
		return 0, fmt.Errorf("evict pod %s: %w", ref, err)
	}
}

// conflictRetry is the pause after a 409 from the Eviction API.
const conflictRetry = 100 * time.Millisecond

// nextWait honours the server's retryAfterSeconds, else doubles backoff up
// to max.
func nextWait(err error, backoff *time.Duration, max time.Duration) time.Duration {
	if secs, ok := apierrors.SuggestsClientDelay(err); ok && secs > 0 {
		return time.Duration(secs) * time.Second
	}
	wait := *backoff
	*backoff = min(*backoff*2, max)
	return wait
}

// ignorableGone: a delete with a UID precondition found the pod, or the
// pod with that UID, no longer there.
func ignorableGone(err error) bool {
	return apierrors.IsNotFound(err) || apierrors.IsConflict(err)
}

func finished(pod *corev1.Pod) bool {
	return pod.Status.Phase == corev1.PodSucceeded || pod.Status.Phase == corev1.PodFailed
}

// blockingPDBs are the budgets that last refused ref's eviction.
func (r *run) blockingPDBs(ref PodRef) []PDBStatus {
	if b, known := r.blockers.current(ref); known && b.Reason == BlockedByPDB {
		return b.PDBs
	}
	return nil
}
