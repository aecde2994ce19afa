package updategraph

import (
	"encoding/json"
	"sort"
)

// Graph is a parsed, validated update graph: every edge names two of its
// releases, every version is unique, every risk has a rule.
type Graph struct {
	Releases         []Release
	Edges            []Edge
	ConditionalEdges []ConditionalEdges

	// byVersion finds a release's position from its version.
	byVersion map[string]int
	// ordered is true when every release carries an age index (the Fedora
	// CoreOS graphs): Order then says which release is newer, and barriers
	// and downgrades can be told apart. Without it, Order is the release's
	// position and says nothing of age.
	ordered bool
}

// Release is a node of the graph: a version, the payload that identifies
// what to run (an OSTree commit checksum or an image pull spec, usually by
// digest) and the service's metadata, with the Fedora CoreOS update
// metadata read from it.
type Release struct {
	Version  string
	Payload  string
	Metadata map[string]string

	// Order is the release's age index when the graph gives one (older
	// releases lower), else its position in the graph.
	Order int

	// Barrier is true for a release every update must stop at; DeadEnd for
	// one with no update out of it. Their reasons are links or text.
	Barrier       bool
	BarrierReason string
	DeadEnd       bool
	DeadEndReason string

	// Rollout, when set, throttles the edges into this release.
	Rollout *Rollout
}

// Edge is an unconditional update from Releases[From] to Releases[To].
type Edge struct {
	From, To int
}

// ConditionalEdges is a group of updates, by version, that share a list of
// risks: each is recommended only when no risk matches the cluster.
type ConditionalEdges struct {
	Edges []VersionEdge
	Risks []Risk
}

// VersionEdge is one update of a conditional group, by version.
type VersionEdge struct {
	From string `json:"from"`
	To   string `json:"to"`
}

// Release finds a release by its version.
func (g *Graph) Release(version string) (Release, bool) {
	i, ok := g.byVersion[version]
	if !ok {
		return Release{}, false
	}
	return g.Releases[i], true
}

// wireGraph is the graph JSON the update services serve: what Parse reads
// and MarshalJSON writes.
type wireGraph struct {
	Version          *int                 `json:"version,omitempty"`
	Nodes            []wireNode           `json:"nodes"`
	Edges            [][2]int             `json:"edges"`
	ConditionalEdges []wireConditionalOut `json:"conditionalEdges,omitempty"`
}

type wireNode struct {
	Version  string            `json:"version"`
	Payload  string            `json:"payload"`
	Metadata map[string]string `json:"metadata"`
}

type wireConditionalOut struct {
	Edges []VersionEdge `json:"edges"`
	Risks []Risk        `json:"risks"`
}

// MarshalJSON writes the graph as the update services serve it, so that a
// graph built here (BuildFCOS) can be served, and a parsed one read again.
func (g *Graph) MarshalJSON() ([]byte, error) {
	out := wireGraph{Nodes: make([]wireNode, len(g.Releases)), Edges: make([][2]int, len(g.Edges))}
	for i, r := range g.Releases {
		metadata := r.Metadata
		if metadata == nil {
			metadata = map[string]string{}
		}
		out.Nodes[i] = wireNode{Version: r.Version, Payload: r.Payload, Metadata: metadata}
	}
	for i, e := range g.Edges {
		out.Edges[i] = [2]int{e.From, e.To}
	}
	for _, c := range g.ConditionalEdges {
		out.ConditionalEdges = append(out.ConditionalEdges, wireConditionalOut(c))
	}
	return json.Marshal(out)
}

// successors lists the positions Releases[from] has an unconditional edge
// to, in ascending order, without repeats.
func (g *Graph) successors(from int) []int {
	seen := map[int]bool{}
	var out []int
	for _, e := range g.Edges {
		if e.From == from && !seen[e.To] {
			seen[e.To] = true
			out = append(out, e.To)
		}
	}
	sort.Ints(out)
	return out
}
