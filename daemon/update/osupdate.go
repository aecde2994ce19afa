package update

import (
	"context"
	"errors"

	"github.com/nodeward/nodeward/osupdate"
)

// OSUpdate adapts the osupdate package's rpm-ostree Updater to the update
// machine: verification by digest, checksum and kernel arguments, and
// canonical targets. Its Rollback is idempotent across a crash and returns
// every failure: a rollback is never assumed.
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

var (
	_ OSUpdater     = OSUpdate{}
	_ OSVerifier    = OSUpdate{}
	_ Canonicalizer = OSUpdate{}
)
