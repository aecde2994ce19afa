package updategraph

import (
	"fmt"
	"math"
	"strconv"
	"time"
)

// The Fedora CoreOS update metadata, as fcos-graph-builder writes it into
// each node's metadata (string values; zincati reads the same keys).
const (
	KeyScheme        = "org.fedoraproject.coreos.scheme"
	KeyAgeIndex      = "org.fedoraproject.coreos.releases.age_index"
	KeyBarrier       = "org.fedoraproject.coreos.updates.barrier"
	KeyBarrierReason = "org.fedoraproject.coreos.updates.barrier_reason"
	KeyDeadEnd       = "org.fedoraproject.coreos.updates.deadend"
	KeyDeadEndReason = "org.fedoraproject.coreos.updates.deadend_reason"
	KeyRollout       = "org.fedoraproject.coreos.updates.rollout"
	KeyStartEpoch    = "org.fedoraproject.coreos.updates.start_epoch"
	KeyStartValue    = "org.fedoraproject.coreos.updates.start_value"
	KeyDuration      = "org.fedoraproject.coreos.updates.duration_minutes"
)

// The payload schemes of the Fedora CoreOS graph.
const (
	SchemeChecksum = "checksum"
	SchemeOCI      = "oci"
)

// Rollout is a staged rollout of a release: the share of nodes the edges
// into it are open to grows from StartValue at StartEpoch to all of them
// after Duration. A zero Duration means no progress past StartValue.
type Rollout struct {
	StartEpoch int64
	StartValue float64
	Duration   time.Duration
}

// Fraction is the share of nodes admitted at now, in [0,1], as the Fedora
// CoreOS policy engine computes it: none before the start, StartValue at
// it, growing linearly to all at the end.
func (r Rollout) Fraction(now time.Time) float64 {
	t := now.Unix()
	if t < r.StartEpoch {
		return 0
	}
	if r.Duration <= 0 {
		return r.StartValue
	}
	end := r.StartEpoch + int64(r.Duration/time.Second)
	if t > end {
		return 1
	}
	rate := (1 - r.StartValue) / float64(end-r.StartEpoch)
	return r.StartValue + rate*float64(t-r.StartEpoch)
}

// Admits says whether a node of this wariness may take the release at now:
// the policy engine hides the edges into it from a node warier than the
// rollout's fraction.
func (r Rollout) Admits(wariness float64, now time.Time) bool {
	return wariness <= r.Fraction(now)
}

// metadataRow reads one key of the Fedora CoreOS metadata into a release.
type metadataRow struct {
	key  string
	read func(r *Release, value string) error
}

// fcosMetadataRows is the table of the keys read, one row each; the reason
// keys are read with the flag they explain.
func fcosMetadataRows() []metadataRow {
	return []metadataRow{
		{KeyBarrier, func(r *Release, v string) (err error) { r.Barrier, err = strconv.ParseBool(v); return }},
		{KeyBarrierReason, func(r *Release, v string) error { r.BarrierReason = v; return nil }},
		{KeyDeadEnd, func(r *Release, v string) (err error) { r.DeadEnd, err = strconv.ParseBool(v); return }},
		{KeyDeadEndReason, func(r *Release, v string) error { r.DeadEndReason = v; return nil }},
		{KeyRollout, readRolloutFlag},
		{KeyStartEpoch, func(r *Release, v string) (err error) {
			r.rollout().StartEpoch, err = strconv.ParseInt(v, 10, 64)
			return
		}},
		{KeyStartValue, readStartValue},
		{KeyDuration, readDuration},
	}
}

func (r *Release) rollout() *Rollout {
	if r.Rollout == nil {
		r.Rollout = &Rollout{}
	}
	return r.Rollout
}

func readRolloutFlag(r *Release, v string) error {
	on, err := strconv.ParseBool(v)
	if on {
		r.rollout()
	}
	return err
}

func readStartValue(r *Release, v string) error {
	f, err := strconv.ParseFloat(v, 64)
	if err != nil {
		return err
	}
	if math.IsNaN(f) || f < 0 || f > 1 {
		return fmt.Errorf("%v is outside [0,1]", f)
	}
	r.rollout().StartValue = f
	return nil
}

// maxRolloutMinutes bounds a rollout's duration so that it fits a
// time.Duration (about 292 years).
const maxRolloutMinutes = math.MaxInt64 / int64(time.Minute)

func readDuration(r *Release, v string) error {
	minutes, err := strconv.ParseUint(v, 10, 64)
	if err != nil {
		return err
	}
	if minutes > uint64(maxRolloutMinutes) {
		return fmt.Errorf("%d minutes is too long", minutes)
	}
	// The policy engine counts a zero duration as one minute.
	r.rollout().Duration = time.Duration(max(minutes, 1)) * time.Minute
	return nil
}

// readFCOSMetadata reads the Fedora CoreOS keys of a release's metadata,
// refusing a malformed value where the policy engine would read a default,
// and says whether the release has an age index. Rollout parameters count
// only on a release whose rollout flag is set, as in the policy engine.
func readFCOSMetadata(path string, r *Release) (hasAge bool, err error) {
	for _, row := range fcosMetadataRows() {
		v, ok := r.Metadata[row.key]
		if !ok {
			continue
		}
		if err := row.read(r, v); err != nil {
			return false, fmt.Errorf("%s.metadata[%q]: %q: %w", path, row.key, v, err)
		}
	}
	if on, _ := strconv.ParseBool(r.Metadata[KeyRollout]); !on {
		r.Rollout = nil
	}
	age, ok := r.Metadata[KeyAgeIndex]
	if !ok {
		return false, nil
	}
	order, err := strconv.Atoi(age)
	if err != nil || order < 0 {
		return false, fmt.Errorf("%s.metadata[%q]: %q is not a non-negative integer", path, KeyAgeIndex, age)
	}
	r.Order = order
	return true, nil
}
