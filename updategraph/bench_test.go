package updategraph

import (
	"context"
	"net/http/httptest"
	"testing"
)

// BenchmarkFCOSSnapshot: the full Fedora CoreOS stable snapshot (179
// releases, 19 barriers, 2 rollouts; testdata/README.md) served by a local
// graph service as fcos-graph-builder would serve it. "fetch-parse" is one
// Fetch (HTTP on the loopback, no entity tag, the body parsed and
// validated); "fetch-not-modified" is a Fetch the service answers with
// 304 (the entity tag matched: nothing parsed); "next-hops" is NextHops from each of the 179 releases;
// "all" is both, what a pool's evaluation costs end to end when every
// release is asked; "build" is BuildFCOS from the release index and the
// update metadata.
func BenchmarkFCOSSnapshot(b *testing.B) {
	service := newGraphService(b)
	server := httptest.NewServer(service)
	defer server.Close()
	src := Source{URL: server.URL + "/v1/graph", Dialect: FedoraCoreOS, Channel: "stable", Arch: "x86_64"}
	body, err := service.body("stable", "x86_64")
	if err != nil {
		b.Fatal(err)
	}
	fetch := func(b *testing.B) *Graph {
		f, err := NewFetcher(src, FetchConfig{})
		if err != nil {
			b.Fatal(err)
		}
		snap, err := f.Fetch(context.Background())
		if err != nil {
			b.Fatal(err)
		}
		return snap.Graph
	}
	policy := Policy{Wariness: 0.5, Now: rolloutHalf}
	hopsFromEvery := func(b *testing.B, g *Graph) {
		for _, r := range g.Releases {
			if _, err := NextHops(g, []Running{{Node: "n", Version: r.Version}}, policy); err != nil {
				b.Fatal(err)
			}
		}
	}
	b.Run("fetch-parse", func(b *testing.B) {
		b.SetBytes(int64(len(body)))
		for b.Loop() {
			fetch(b)
		}
	})
	b.Run("fetch-not-modified", func(b *testing.B) {
		f, err := NewFetcher(src, FetchConfig{})
		if err != nil {
			b.Fatal(err)
		}
		if _, err := f.Fetch(context.Background()); err != nil {
			b.Fatal(err)
		}
		for b.Loop() {
			if _, err := f.Fetch(context.Background()); err != nil {
				b.Fatal(err)
			}
		}
	})
	g := fetch(b)
	b.Run("next-hops", func(b *testing.B) {
		for b.Loop() {
			hopsFromEvery(b, g)
		}
	})
	b.Run("all", func(b *testing.B) {
		for b.Loop() {
			hopsFromEvery(b, fetch(b))
		}
	})
	b.Run("build", func(b *testing.B) {
		for b.Loop() {
			fcosGraph(b, "stable", Scope{Arch: "x86_64"})
		}
	})
}
