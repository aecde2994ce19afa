package drift

import (
	"context"

	"github.com/nodeward/nodeward/machineconfig"
)

// check re-arms the watches on the config's paths as they are now, then
// re-checks the whole config and reports a change of its drift. It fails
// only when a watch is refused; a failed check is logged and the drift
// last reported stands.
func (r *run) check(ctx context.Context) error {
	o := r.m.opts
	paths, err := o.Checker.Paths(o.Config)
	if err != nil {
		o.Log.Warn("config drift check: listing the config's paths failed", "err", err)
		return nil
	}
	if err := r.arm(paths); err != nil {
		return err
	}
	d, err := o.Checker.Drift(o.Config)
	if err != nil {
		o.Log.Warn("config drift check failed", "err", err)
		return nil
	}
	r.report(ctx, d)
	return nil
}

// arm watches the directories of paths, logging a change of what is
// watched.
func (r *run) arm(paths []string) error {
	o := r.m.opts
	t := targetsOf(paths, o.MaxWatches)
	if err := r.in.watch(t.dirs); err != nil {
		return err
	}
	if len(t.dirs) != len(r.targets.dirs) || t.dropped != r.targets.dropped {
		o.Log.Debug("config drift monitor watching", "paths", len(paths), "dirs", len(t.dirs))
		if t.dropped > 0 {
			o.Log.Warn("config drift monitor: too many directories to watch; the rest are re-checked periodically only",
				"watched", len(t.dirs), "unwatched", t.dropped, "interval", o.Interval)
		}
	}
	r.targets = t
	return nil
}

// report calls OnReport when the drift differs from the one last reported.
func (r *run) report(ctx context.Context, d *machineconfig.DriftError) {
	o := r.m.opts
	switch {
	case d == nil && r.last == nil:
		return
	case d != nil && r.last != nil && *d == *r.last:
		return
	case d == nil:
		o.Log.Info("config drift gone", "path", r.last.Path)
	default:
		o.Log.Error("config drift detected", "path", d.Path, "field", d.Field, "err", d.Message)
	}
	r.last = d
	o.OnReport(ctx, Report{Drift: d, At: o.Clock.Now()})
}
