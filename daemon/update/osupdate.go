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

// Disruption implements LiveUpdater: a target whose OS is the booted one
// already (the booted image's digest pinned, the same kernel arguments)
// neither drains nor reboots; any other drains and reboots.
func (o OSUpdate) Disruption(ctx context.Context, target string) (Disruption, error) {
	same, err := o.BootedIs(ctx, target)
	if err != nil || !same {
		return Disruption{}, err
	}
	return Disruption{NoDrain: true, NoReboot: true,
		Reason: "the booted deployment is the target's OS already (same image digest and kernel arguments)"}, nil
}

// ApplyLive implements LiveUpdater: the booted deployment becomes the
// target's.
func (o OSUpdate) ApplyLive(ctx context.Context, target string) error {
	return o.Adopt(ctx, target)
}

var (
	_ LiveUpdater   = OSUpdate{}
	_ OSUpdater     = OSUpdate{}
	_ OSVerifier    = OSUpdate{}
	_ Canonicalizer = OSUpdate{}
)
