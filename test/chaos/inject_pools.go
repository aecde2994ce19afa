package chaos

import (
	"context"
	"fmt"
	"time"

	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"

	v1alpha1 "github.com/nodeward/nodeward/api/v1alpha1"
	"github.com/nodeward/nodeward/test/cluster"
)

// The faults on a worker pool's UpdatePool: deleted and created again,
// and its drain policy switched.

// drainTimeout bounds a blocked drain in both worker pools: shorter than
// a PDBBlock's hold, so that onTimeout decides.
const drainTimeout = "6s"

func (in *Injector) workerPools() []string {
	var names []string
	for _, name := range in.WorkerPools {
		names = append(names, name)
	}
	return names
}

// poolsWithGrants are the worker pools with grants out, by the watcher's
// view.
func (in *Injector) poolsWithGrants() []string {
	out := map[string]bool{}
	for _, v := range in.Watcher.Nodes() {
		if v.Grant != "" {
			out[v.GrantPool] = true
		}
	}
	var names []string
	for _, name := range in.workerPools() {
		if out[name] {
			names = append(names, name)
		}
	}
	return names
}

// recreateWait bounds the wait for a worker pool with grants out.
const recreateWait = 20 * time.Second

// recreatePool deletes a worker pool, the first to have grants out within
// recreateWait (any, after that), and creates it again with the same
// name, labels and spec after Hold (as an admin re-applying a manifest
// would: none of the annotations the coordinator wrote). It runs in the
// background; the run waits for it like for an undo.
func (in *Injector) recreatePool(ctx context.Context, r *Record, _ int) error {
	r.Detail = "waiting for a worker pool with grants out"
	in.undos.Go(func() {
		deadline := time.Now().Add(recreateWait)
		cands := in.poolsWithGrants()
		for len(cands) == 0 && time.Now().Before(deadline) && ctx.Err() == nil {
			sleep(ctx, 200*time.Millisecond)
			cands = in.poolsWithGrants()
		}
		if len(cands) == 0 {
			cands = in.workerPools()
		}
		in.mu.Lock()
		r.Victim = pick(cands, r.Pick)
		in.mu.Unlock()
		pool, uid, err := in.deletePool(ctx, r)
		if err != nil {
			in.Log("recreate-pool: delete %s: %v", r.Victim, err)
			return
		}
		in.later(ctx, r, r.Hold, func(ctx context.Context) error {
			err := cluster.CreatePool(ctx, in.Dynamic, pool)
			if !apierrors.IsAlreadyExists(err) {
				return err
			}
			// The deleted pool stays while its finalizer waits for the
			// grants it recorded to settle; then it goes and is created
			// again.
			cur, err := in.pool(ctx, pool.Name)
			switch {
			case apierrors.IsNotFound(err):
				return fmt.Errorf("pool %s went meanwhile: create it again", pool.Name)
			case err != nil:
				return err
			case cur.UID == uid:
				return fmt.Errorf("pool %s is still being deleted (finalizers %v)", pool.Name, cur.Finalizers)
			}
			return nil
		})
	})
	return nil
}

// deletePool deletes r's victim pool and returns what to create again and
// the UID of the pool deleted.
func (in *Injector) deletePool(ctx context.Context, r *Record) (*v1alpha1.UpdatePool, types.UID, error) {
	var again *v1alpha1.UpdatePool
	var uid types.UID
	err := in.retry(ctx, func(ctx context.Context) error {
		p, err := in.pool(ctx, r.Victim)
		if err != nil {
			return err
		}
		again, uid = &v1alpha1.UpdatePool{ObjectMeta: metav1.ObjectMeta{Name: p.Name, Labels: p.Labels}, Spec: p.Spec}, p.UID
		held := 0
		for _, v := range in.Watcher.Nodes() {
			if v.Grant != "" && v.GrantPool == r.Victim {
				held++
			}
		}
		in.mu.Lock()
		r.Detail = fmt.Sprintf("deleted with %d grants out", held)
		in.mu.Unlock()
		err = in.Dynamic.Resource(v1alpha1.UpdatePoolResource()).Delete(ctx, r.Victim,
			metav1.DeleteOptions{Preconditions: &metav1.Preconditions{UID: &p.UID}})
		if apierrors.IsNotFound(err) {
			return nil
		}
		return err
	})
	return again, uid, err
}

// switchDrainPolicy switches a worker pool's spec.drain.onTimeout from
// Force to Retry or back (a pool without a drain policy gets Force).
func (in *Injector) switchDrainPolicy(ctx context.Context, r *Record, _ int) error {
	r.Victim = pick(in.workerPools(), r.Pick)
	return in.retry(ctx, func(ctx context.Context) error {
		p, err := in.pool(ctx, r.Victim)
		if err != nil {
			return err
		}
		from, to := "Retry", "Force"
		if p.Spec.Drain != nil && p.Spec.Drain.OnTimeout == "Force" {
			from, to = "Force", "Retry"
		}
		r.Detail = fmt.Sprintf("onTimeout %s → %s", from, to)
		return in.patchPool(ctx, r.Victim, map[string]any{"spec": map[string]any{
			"drain": map[string]any{"onTimeout": to, "timeout": drainTimeout}}})
	})
}
