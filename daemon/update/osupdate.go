package update

import (
	"context"
	"errors"

	"github.com/nodeward/nodeward/osupdate"
)

// OSUpdate adapts the osupdate package's rpm-ostree Updater to the update
// machine: verification by digest, checksum and kernel arguments, canonical
// targets, and a rollback that is idempotent across a crash.
type OSUpdate struct {
	*osupdate.Updater
}

// VerifyBooted implements OSVerifier.
func (o OSUpdate) VerifyBooted(ctx context.Context, target string) (bool, string, error) {
	err := o.Verify(ctx, target)
	var failed *osupdate.VerifyError
	switch {
	case err == nil:
		return true, "", nil
	case errors.As(err, &failed):
		return false, failed.Error(), nil
	default:
		return false, "", err
	}
}

// Rollback implements OSUpdater. A rollback already done for the target
// (before a crash) counts as done.
func (o OSUpdate) Rollback(ctx context.Context) error {
	if err := o.Updater.Rollback(ctx); err != nil && !errors.Is(err, osupdate.ErrAlreadyRolledBack) {
		return err
	}
	return nil
}

var (
	_ OSUpdater     = OSUpdate{}
	_ OSVerifier    = OSUpdate{}
	_ Canonicalizer = OSUpdate{}
)
