package update

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/nodeward/nodeward/drain"
)

// forceAfter is how long a forced drain lets evictions work before it
// deletes the pods still blocking: only the blockers are forced.
const forceAfter = 10 * time.Second

// KubeWorkloads is the machine's Workloads over the drain package.
type KubeWorkloads struct {
	normal, force *drain.Drainer
	cfg           drain.Config
}

// NewKubeWorkloads builds the drainers of cfg.Node: the normal one retries
// (the machine owns the timeout and the yield); the forced one deletes what
// still blocks after forceAfter.
func NewKubeWorkloads(cfg drain.Config) (*KubeWorkloads, error) {
	cfg.Options.Timeout, cfg.Options.OnTimeout = 0, drain.Retry
	normal, err := drain.New(cfg)
	if err != nil {
		return nil, err
	}
	fcfg := cfg
	fcfg.Options.Timeout, fcfg.Options.OnTimeout = forceAfter, drain.Force
	force, err := drain.New(fcfg)
	if err != nil {
		return nil, err
	}
	return &KubeWorkloads{normal: normal, force: force, cfg: cfg}, nil
}

// Cordon implements Workloads.
func (k *KubeWorkloads) Cordon(ctx context.Context) (bool, error) { return k.normal.Cordon(ctx) }

// Uncordon implements Workloads: only nodeward's own cordon is lifted.
func (k *KubeWorkloads) Uncordon(ctx context.Context) error {
	_, err := k.normal.Uncordon(ctx, false)
	return err
}

// Drain implements Workloads: one attempt, bounded by ctx. Pods that block
// (a PDB, a refusal) make it drain.ErrBlocked, with the report in the error.
func (k *KubeWorkloads) Drain(ctx context.Context) error {
	return asBlocked(k.normal.Drain(ctx))
}

// Undrained implements Workloads.
func (k *KubeWorkloads) Undrained(ctx context.Context) ([]drain.PodRef, error) {
	return k.normal.Undrained(ctx)
}

// ForceDrain implements Workloads.
func (k *KubeWorkloads) ForceDrain(ctx context.Context) error {
	return asBlocked(k.force.Drain(ctx))
}

// ReportHooks implements Workloads: the Drainable or Rebootable condition
// names the hooks holding the step.
func (k *KubeWorkloads) ReportHooks(ctx context.Context, point drain.HookPoint, hooks []drain.Hook) error {
	return point.Publish(ctx, k.cfg.Client, k.cfg.Node, hooks)
}

// asBlocked makes every way a drain attempt can end without draining (a
// PDB, a refused eviction, the attempt's deadline) a drain.ErrBlocked, which
// the machine waits on instead of failing.
func asBlocked(_ *drain.Result, err error) error {
	switch {
	case err == nil, errors.Is(err, drain.ErrBlocked):
		return err
	case errors.Is(err, drain.ErrRefused), errors.Is(err, context.DeadlineExceeded):
		return fmt.Errorf("%w: %w", drain.ErrBlocked, err)
	}
	return err
}
