// Package updategraph reads update graphs and computes a pool's next OS
// hop from them. It is a leaf: it imports nothing of nodeward, and nothing
// in it blocks except the Fetcher.
//
// Two dialects of the Cincinnati graph are understood:
//
//   - OpenShift's: nodes, edges by index, and conditionalEdges (edges by
//     version sharing a list of risks, each with matching rules), as the
//     update service serves it to the cluster version operator (Parse).
//   - Fedora CoreOS's: the same graph JSON with the releases' update
//     metadata (barriers, dead-ends, staged rollouts) as string keys of each
//     node's metadata, as fcos-graph-builder computes it from the release
//     index (releases.json) and the update metadata (updates/<stream>.json)
//     of coreos/fedora-coreos-streams. BuildFCOS computes it the same way
//     from those two files, so that tests and an offline mirror need no
//     graph service.
//
// NextHops is pure: from the releases a pool's nodes run, the graph and a
// Policy (releases denied because they rolled back on a node of the pool,
// the pool's rollout wariness, the time), it lists the candidates and, with
// a reason each, the targets it refused. The Fetcher gets a graph over HTTP
// with a timeout, backs off after failures, keeps the last good graph and
// fails closed: a graph that cannot be fetched or parsed is an error that
// says why, never a partial graph.
package updategraph
