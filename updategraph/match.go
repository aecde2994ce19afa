package updategraph

import (
	"fmt"
	"sort"
	"strings"
)

// Running is what one node runs, as its agent reports it: any of the
// version, the OSTree commit checksum or the image digest
// ("sha256:…", or a pull spec by digest).
type Running struct {
	Node        string
	Version     string
	Checksum    string
	ImageDigest string
}

// identifies says whether id names the release: its version, its payload,
// or the digest its payload is pinned to.
func identifies(r Release, id string) bool {
	if id == "" {
		return false
	}
	if id == r.Version || id == r.Payload {
		return true
	}
	digest := id
	if at := strings.LastIndexByte(id, '@'); at >= 0 {
		digest = id[at+1:]
	}
	return strings.HasSuffix(r.Payload, "@"+digest)
}

// find locates what a node runs in the graph. Every identifier it gives
// must name the same release: a version that says one release and a
// digest another is an error, not a guess.
func (g *Graph) find(run Running) (int, error) {
	found := -1
	for _, id := range []string{run.Version, run.Checksum, run.ImageDigest} {
		if id == "" {
			continue
		}
		at := g.findOne(id)
		if at < 0 {
			return -1, fmt.Errorf("node %s runs %s, which is not in the graph", run.Node, id)
		}
		if found >= 0 && at != found {
			return -1, fmt.Errorf("node %s: %s is release %s but another of its identifiers is release %s",
				run.Node, id, g.Releases[at].Version, g.Releases[found].Version)
		}
		found = at
	}
	if found < 0 {
		return -1, fmt.Errorf("node %s reports no version, checksum or image digest", run.Node)
	}
	return found, nil
}

func (g *Graph) findOne(id string) int {
	if i, ok := g.byVersion[id]; ok {
		return i
	}
	for i, r := range g.Releases {
		if identifies(r, id) {
			return i
		}
	}
	return -1
}

// current finds the one release a pool's nodes run. Nodes on different
// releases (a rollout not finished, or rolled back on some) have no one
// next hop: the error lists them.
func (g *Graph) current(running []Running) (int, error) {
	if len(running) == 0 {
		return -1, fmt.Errorf("the pool has no nodes to find in the graph")
	}
	nodesOn := map[int][]string{}
	for _, run := range running {
		at, err := g.find(run)
		if err != nil {
			return -1, err
		}
		nodesOn[at] = append(nodesOn[at], run.Node)
	}
	if len(nodesOn) == 1 {
		for at := range nodesOn {
			return at, nil
		}
	}
	var parts []string
	for at, nodes := range nodesOn {
		parts = append(parts, fmt.Sprintf("%s on %s", strings.Join(nodes, ","), g.Releases[at].Version))
	}
	sort.Strings(parts)
	return -1, fmt.Errorf("the pool's nodes run %d releases (%s): the next hop waits for one", len(nodesOn), strings.Join(parts, "; "))
}
