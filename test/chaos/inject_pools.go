package chaos

import (
	"context"
	"fmt"

	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

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

// poolsWithGrants are the worker pools with grants out (by the watcher's
// view), or every worker pool when none has.
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
	if len(names) == 0 {
		return in.workerPools()
	}
	return names
}

// recreatePool deletes a worker pool (one with grants out, when there is
// one) and creates it again with the same
// name, labels and spec after Hold (as an admin re-applying a manifest
// would: none of the annotations the coordinator wrote).
func (in *Injector) recreatePool(ctx context.Context, r *Record, _ int) error {
	r.Victim = pick(in.poolsWithGrants(), r.Pick)
	var spec v1alpha1.UpdatePoolSpec
	var labels map[string]string
	err := in.retry(ctx, func(ctx context.Context) error {
		p, err := in.pool(ctx, r.Victim)
		if err != nil {
			return err
		}
		spec, labels = p.Spec, p.Labels
		held := 0
		for _, v := range in.Watcher.Nodes() {
			if v.Grant != "" && v.GrantPool == r.Victim {
				held++
			}
		}
		r.Detail = fmt.Sprintf("deleted with %d grants out", held)
		err = in.Dynamic.Resource(v1alpha1.UpdatePoolResource()).Delete(ctx, r.Victim,
			metav1.DeleteOptions{Preconditions: &metav1.Preconditions{UID: &p.UID}})
		if apierrors.IsNotFound(err) {
			return nil
		}
		return err
	})
	if err != nil {
		return err
	}
	in.later(ctx, r, r.Hold, func(ctx context.Context) error {
		p := &v1alpha1.UpdatePool{ObjectMeta: metav1.ObjectMeta{Name: r.Victim, Labels: labels}, Spec: spec}
		err := cluster.CreatePool(ctx, in.Dynamic, p)
		if apierrors.IsAlreadyExists(err) {
			return nil
		}
		return err
	})
	return nil
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
