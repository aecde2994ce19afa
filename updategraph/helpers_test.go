package updategraph

import (
	"os"
	"path/filepath"
	"testing"
)

func readTestdata(tb testing.TB, path string) []byte {
	tb.Helper()
	data, err := os.ReadFile(filepath.Join("testdata", path))
	if err != nil {
		tb.Fatalf("reading test data: %v", err)
	}
	return data
}

// fcosGraph builds a stream's graph from the snapshot of its update
// metadata and its derived release index (testdata/README.md).
func fcosGraph(tb testing.TB, stream string, scope Scope) *Graph {
	tb.Helper()
	index, err := ParseReleaseIndex(readTestdata(tb, "fcos/releases/"+stream+".json"))
	if err != nil {
		tb.Fatalf("release index of %s: %v", stream, err)
	}
	updates, err := ParseUpdates(readTestdata(tb, "fcos/updates/"+stream+".json"))
	if err != nil {
		tb.Fatalf("update metadata of %s: %v", stream, err)
	}
	g, err := BuildFCOS(index, updates, scope)
	if err != nil {
		tb.Fatalf("building the %s graph: %v", stream, err)
	}
	return g
}

func openshiftGraph(tb testing.TB) *Graph {
	tb.Helper()
	g, err := Parse(readTestdata(tb, "openshift/graph.json"))
	if err != nil {
		tb.Fatalf("parsing the OpenShift test graph: %v", err)
	}
	return g
}

func versionsOf(cs []Candidate) []string {
	var out []string
	for _, c := range cs {
		out = append(out, c.Release.Version)
	}
	return out
}
