package updategraph

// CompareVersions orders two release versions as the graph's candidates
// are ordered where the graph gives no order: dotted numeric fields
// compared as numbers (4.18.10 after 4.18.9), a pre-release before its
// release. It returns -1, 0 or 1. Exported so that `nodeward upgrade`
// lists releases in the same order as the next-hop rules, not in a second
// ordering of its own.
func CompareVersions(a, b string) int { return compareVersions(a, b) }
