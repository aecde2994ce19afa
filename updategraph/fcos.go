package updategraph

import (
	"errors"
	"fmt"
	"sort"
	"strconv"
)

// ReleaseIndex is a Fedora CoreOS stream's release index (releases.json):
// every release, oldest first, with its payload per architecture.
type ReleaseIndex struct {
	Releases []IndexedRelease `json:"releases"`
}

// IndexedRelease is one release of the index: its OSTree commits and its
// OCI images, one per architecture.
type IndexedRelease struct {
	Version   string     `json:"version"`
	Metadata  string     `json:"metadata"`
	Commits   []Commit   `json:"commits"`
	OCIImages []OCIImage `json:"oci-images"`
}

// Commit is a release's OSTree commit for one architecture.
type Commit struct {
	Architecture string `json:"architecture"`
	Checksum     string `json:"checksum"`
}

// OCIImage is a release's container image for one architecture, pinned by
// digest in DigestRef.
type OCIImage struct {
	Architecture string `json:"architecture"`
	Image        string `json:"image"`
	DigestRef    string `json:"digest-ref"`
}

// Updates is a stream's update metadata (updates/<stream>.json).
type Updates struct {
	Stream   string          `json:"stream"`
	Releases []UpdateRelease `json:"releases"`
}

// UpdateRelease is the update metadata of one release.
type UpdateRelease struct {
	Version  string         `json:"version"`
	Metadata UpdateMetadata `json:"metadata"`
}

// UpdateMetadata marks a release a barrier, a dead-end or under rollout.
type UpdateMetadata struct {
	Barrier *Reasoned      `json:"barrier"`
	DeadEnd *Reasoned      `json:"deadend"`
	Rollout *UpdateRollout `json:"rollout"`
}

// Reasoned carries why a release is a barrier or a dead-end.
type Reasoned struct {
	Reason string `json:"reason"`
}

// UpdateRollout is a rollout as the update metadata writes it; every
// field may be absent.
type UpdateRollout struct {
	StartEpoch      *int64   `json:"start_epoch"`
	StartPercentage *float64 `json:"start_percentage"`
	DurationMinutes *uint64  `json:"duration_minutes"`
}

// ParseReleaseIndex reads and validates a release index: each release has
// a unique version.
func ParseReleaseIndex(data []byte) (ReleaseIndex, error) {
	var index ReleaseIndex
	if err := decodeAt("releases.json", data, &index); err != nil {
		return ReleaseIndex{}, err
	}
	seen := map[string]int{}
	for i, r := range index.Releases {
		if r.Version == "" {
			return ReleaseIndex{}, fmt.Errorf("releases[%d].version: missing", i)
		}
		if j, dup := seen[r.Version]; dup {
			return ReleaseIndex{}, fmt.Errorf("releases[%d].version: %q is also releases[%d]'s", i, r.Version, j)
		}
		seen[r.Version] = i
	}
	return index, nil
}

// ParseUpdates reads and validates a stream's update metadata: a stream,
// and releases with a version and a rollout's start percentage in [0,1].
func ParseUpdates(data []byte) (Updates, error) {
	var updates Updates
	if err := decodeAt("updates", data, &updates); err != nil {
		return Updates{}, err
	}
	if updates.Stream == "" {
		return Updates{}, errors.New("stream: missing")
	}
	for i, r := range updates.Releases {
		if r.Version == "" {
			return Updates{}, fmt.Errorf("releases[%d].version: missing", i)
		}
		if ro := r.Metadata.Rollout; ro != nil && ro.StartPercentage != nil && !(*ro.StartPercentage >= 0 && *ro.StartPercentage <= 1) {
			return Updates{}, fmt.Errorf("releases[%d].metadata.rollout.start_percentage: %v is outside [0,1]", i, *ro.StartPercentage)
		}
	}
	return updates, nil
}

// Scope is the graph of one architecture, by OSTree commit or by OCI image.
type Scope struct {
	Arch string
	OCI  bool
}

// BuildFCOS computes a stream's graph from its release index and update
// metadata, as fcos-graph-builder does: a release without a payload for
// the scope is left out; every release gets edges into the next barrier
// after it and into every release under rollout up to that barrier; no
// edge leaves a dead-end. The graph's metadata carries the update metadata
// under the keys zincati reads.
func BuildFCOS(index ReleaseIndex, updates Updates, scope Scope) (*Graph, error) {
	byVersion := map[string]UpdateMetadata{}
	for _, u := range updates.Releases {
		byVersion[u.Version] = u.Metadata
	}
	g := &Graph{byVersion: map[string]int{}, ordered: true}
	for age, entry := range index.Releases {
		payload, scheme := payloadFor(entry, scope)
		if payload == "" {
			continue
		}
		r := Release{Version: entry.Version, Payload: payload, Metadata: map[string]string{
			KeyAgeIndex: strconv.Itoa(age),
			KeyScheme:   scheme,
		}}
		updateKeys(r.Metadata, byVersion[entry.Version])
		path := fmt.Sprintf("releases[%d]", age)
		if _, err := readFCOSMetadata(path, &r); err != nil {
			return nil, err
		}
		g.byVersion[r.Version] = len(g.Releases)
		g.Releases = append(g.Releases, r)
	}
	g.Edges = fcosEdges(g.Releases)
	return g, nil
}

// payloadFor picks the release's payload for the scope; the last entry of
// the architecture wins, as in the graph builder.
func payloadFor(entry IndexedRelease, scope Scope) (payload, scheme string) {
	if scope.OCI {
		for _, image := range entry.OCIImages {
			if image.Architecture == scope.Arch && image.DigestRef != "" {
				payload, scheme = image.DigestRef, SchemeOCI
			}
		}
		return payload, scheme
	}
	for _, commit := range entry.Commits {
		if commit.Architecture == scope.Arch && commit.Checksum != "" {
			payload, scheme = commit.Checksum, SchemeChecksum
		}
	}
	return payload, scheme
}

// updateKeys writes a release's update metadata as the graph's keys; an
// empty reason reads "generic", as the graph builder writes it.
func updateKeys(metadata map[string]string, u UpdateMetadata) {
	reason := func(r *Reasoned) string {
		if r.Reason == "" {
			return "generic"
		}
		return r.Reason
	}
	if u.DeadEnd != nil {
		metadata[KeyDeadEnd], metadata[KeyDeadEndReason] = "true", reason(u.DeadEnd)
	}
	if u.Barrier != nil {
		metadata[KeyBarrier], metadata[KeyBarrierReason] = "true", reason(u.Barrier)
	}
	if ro := u.Rollout; ro != nil {
		metadata[KeyRollout] = "true"
		if ro.StartEpoch != nil {
			metadata[KeyStartEpoch] = strconv.FormatInt(*ro.StartEpoch, 10)
		}
		if ro.StartPercentage != nil {
			metadata[KeyStartValue] = strconv.FormatFloat(*ro.StartPercentage, 'g', -1, 64)
		}
		if ro.DurationMinutes != nil {
			metadata[KeyDuration] = strconv.FormatUint(*ro.DurationMinutes, 10)
		}
	}
}

// fcosEdges computes the graph builder's edges over positions: into each
// release under rollout from every release since the barrier before it,
// into each barrier not under rollout from every release since the barrier
// before it; then drops the edges out of dead-ends.
func fcosEdges(releases []Release) []Edge {
	var barriers []int
	for i, r := range releases {
		if r.Barrier {
			barriers = append(barriers, i)
		}
	}
	previousBarrier := func(i int) int {
		k := sort.SearchInts(barriers, i) // the first barrier at or after i
		if k == 0 {
			return 0
		}
		return barriers[k-1]
	}
	var edges []Edge
	for to := len(releases) - 1; to >= 0; to-- {
		if releases[to].Rollout != nil {
			edges = appendRange(edges, previousBarrier(to), to, releases)
		}
	}
	start := 0
	for _, to := range barriers {
		if releases[to].Rollout == nil {
			edges = appendRange(edges, start, to, releases)
		}
		start = to
	}
	return edges
}

// appendRange adds the edges from each of releases[from:to] into to,
// leaving out those from a dead-end.
func appendRange(edges []Edge, from, to int, releases []Release) []Edge {
	for i := from; i < to; i++ {
		if !releases[i].DeadEnd {
			edges = append(edges, Edge{From: i, To: to})
		}
	}
	return edges
}
