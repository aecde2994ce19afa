package osupdate

import (
	"context"
	"errors"
	"fmt"
	"slices"
)

// Rollback rolls back the target nodeward last staged (see RollbackTarget).
func (u *Updater) Rollback(ctx context.Context) error {
	state, err := loadState(u.cfg.StatePath)
	if err != nil {
		return err
	}
	if state.Staged == nil {
		return errors.New("rolling back: no staged target recorded, nothing to roll back from")
	}
	return u.RollbackTarget(ctx, state.Staged.Target, "verification failed")
}

// RollbackTarget makes the known-good deployment (the one before target)
// the default for the next boot and remembers target as failed so that
// Stage refuses it until the target changes. It does not reboot. The
// rollback deployment is never deleted. It is idempotent: called again —
// after a crash inside it, or after its reboot — it checks and, where
// needed, finishes the same rollback, and never rolls back from the
// known-good deployment to an older one.
func (u *Updater) RollbackTarget(ctx context.Context, target, reason string) error {
	t, err := u.ParseTarget(target)
	if err != nil {
		return err
	}
	state, err := loadState(u.cfg.StatePath)
	if err != nil {
		return err
	}
	st, err := u.idleStatus(ctx)
	if err != nil {
		return fmt.Errorf("rolling back %s: %w", t, err)
	}
	good, err := knownGood(st, state, t)
	if err != nil {
		return err
	}
	// Record first, so that Stage refuses the target even if we crash
	// mid-rollback; a second call finishes the rollback.
	if !slices.Contains(state.RolledBack, t.String()) {
		state.RolledBack = append(state.RolledBack, t.String())
	}
	state.FailedTarget, state.FailureReason = t.String(), reason
	if err := saveState(u.cfg.StatePath, state); err != nil {
		return err
	}
	if err := u.bootNext(ctx, st, t, good); err != nil {
		return err
	}
	u.cfg.Log.Warn("rolled back OS update", "target", t.String(), "reason", reason, "nextBoot", good.Checksum)
	return nil
}

// knownGood is the deployment to return to from t: the booted one, unless
// the booted one is t (by its reference, or the checksum nodeward recorded
// staging t), in which case the rollback deployment before it.
func knownGood(st *Status, state persisted, t Target) (*Deployment, error) {
	digest := ""
	if state.Staged != nil && state.Staged.Target == t.String() {
		digest = state.Staged.Digest
	}
	booted := st.Booted()
	bootedIsTarget := deploymentMatches(booted, t, digest) ||
		(state.Staged != nil && state.Staged.Target == t.String() && booted.Checksum == state.Staged.Checksum)
	if !bootedIsTarget {
		return booted, nil
	}
	good := st.Rollback()
	if good == nil {
		return nil, fmt.Errorf("rolling back %s: no rollback deployment to return to", t)
	}
	return good, nil
}

// bootNext makes good the deployment of the next boot: it removes what is
// staged (st is the status before), runs `rpm-ostree rollback` when
// another deployment comes first, and checks the result.
func (u *Updater) bootNext(ctx context.Context, st *Status, t Target, good *Deployment) error {
	if st.Staged() != nil {
		if err := u.mutate(ctx, u.cfg.FinalizeTimeout, "cleanup", "-p"); err != nil {
			return fmt.Errorf("rolling back %s: removing the staged deployment: %w", t, err)
		}
	}
	st, err := u.Status(ctx)
	if err != nil {
		return fmt.Errorf("rolling back %s: %w", t, err)
	}
	if d := defaultDeployment(st); d != nil && d.Checksum != good.Checksum {
		if err := u.mutate(ctx, u.cfg.FinalizeTimeout, "rollback"); err != nil {
			return fmt.Errorf("rolling back %s: %w", t, err)
		}
		if st, err = u.Status(ctx); err != nil {
			return fmt.Errorf("rolling back %s: %w", t, err)
		}
	}
	if d := defaultDeployment(st); d == nil || d.Checksum != good.Checksum {
		return fmt.Errorf("rolling back %s: next boot would not be the known-good deployment %s", t, good.Checksum)
	}
	return nil
}

// FailedTarget returns the target that failed and was rolled back, if any.
func (u *Updater) FailedTarget() (target, reason string, err error) {
	state, err := loadState(u.cfg.StatePath)
	return state.FailedTarget, state.FailureReason, err
}

// defaultDeployment is the one the next boot uses: the staged deployment,
// else the first in bootloader order.
func defaultDeployment(st *Status) *Deployment {
	if s := st.Staged(); s != nil {
		return s
	}
	if len(st.Deployments) == 0 {
		return nil
	}
	return &st.Deployments[0]
}
