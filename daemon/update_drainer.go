package daemon

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/nodeward/nodeward/api/v1alpha1"
	"github.com/nodeward/nodeward/drain"
)

// CordonedByAnnotation records on a Node that nodeward cordoned it (see
// drain.Drainer.Cordon).
const CordonedByAnnotation = v1alpha1.AnnotationCordonedBy

// forceAfter is how long a forced drain lets evictions work before it
// deletes the pods still blocking: only the blockers are forced.
const forceAfter = 10 * time.Second

// KubeDrainer is the machine's Drainer over the drain package.
type KubeDrainer struct {
	normal, force *drain.Drainer
	cfg           drain.Config
}

// NewKubeDrainer builds the drainers of cfg.Node: the normal one retries
// (the machine owns the timeout and the yield); the forced one deletes what
// still blocks after forceAfter.
func NewKubeDrainer(cfg drain.Config) (*KubeDrainer, error) {
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
	return &KubeDrainer{normal: normal, force: force, cfg: cfg}, nil
}

// Cordon implements Drainer.
func (k *KubeDrainer) Cordon(ctx context.Context) (bool, error) { return k.normal.Cordon(ctx) }

// Uncordon implements Drainer: only nodeward's own cordon is lifted.
func (k *KubeDrainer) Uncordon(ctx context.Context) error {
	_, err := k.normal.Uncordon(ctx, false)
	return err
}

// Drain implements Drainer: one attempt, bounded by ctx. Pods that block
// (a PDB, a refusal) make it ErrDrainBlocked, with the report in the error.
func (k *KubeDrainer) Drain(ctx context.Context) error {
	return asBlocked(k.normal.Drain(ctx))
}

// ForceDrain implements ForceDrainer.
func (k *KubeDrainer) ForceDrain(ctx context.Context) error {
	return asBlocked(k.force.Drain(ctx))
}

// ReportHooks implements HookReporter: the Drainable or Rebootable
// condition names the hooks holding the step.
func (k *KubeDrainer) ReportHooks(ctx context.Context, point drain.HookPoint, hooks []drain.Hook) error {
	return point.Publish(ctx, k.cfg.Client, k.cfg.Node, hooks)
}

func asBlocked(_ *drain.Result, err error) error {
	switch {
	case err == nil:
		return nil
	case errors.Is(err, drain.ErrBlocked), errors.Is(err, drain.ErrRefused),
		errors.Is(err, context.DeadlineExceeded):
		return fmt.Errorf("%w: %w", ErrDrainBlocked, err)
	}
	return err
}

// ForceDrainer is implemented by drainers that can delete the pods still
// blocking a drain, for pools whose drain policy is onTimeout: Force.
type ForceDrainer interface {
	ForceDrain(ctx context.Context) error
}

// HookReporter is implemented by drainers that publish which lifecycle
// hooks hold a step.
type HookReporter interface {
	ReportHooks(ctx context.Context, point drain.HookPoint, hooks []drain.Hook) error
}
