package coordinator

import (
	"context"
	"fmt"
	"log/slog"
	"os"
	"testing"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/nodeward/nodeward/api/v1alpha1"
	"github.com/nodeward/nodeward/updategraph"
)

// BenchmarkOfferUpdatesFCOS is one pass's update offer for a pool of 1000
// nodes on the Fedora CoreOS stable snapshot (179 releases), the graph
// already fetched: what a pass adds to planning with a source.
func BenchmarkOfferUpdatesFCOS(b *testing.B) {
	read := func(path string) []byte {
		data, err := os.ReadFile("../updategraph/testdata/fcos/" + path)
		if err != nil {
			b.Fatal(err)
		}
		return data
	}
	index, err := updategraph.ParseReleaseIndex(read("releases/stable.json"))
	if err != nil {
		b.Fatal(err)
	}
	updates, err := updategraph.ParseUpdates(read("updates/stable.json"))
	if err != nil {
		b.Fatal(err)
	}
	g, err := updategraph.BuildFCOS(index, updates, updategraph.Scope{Arch: "x86_64", OCI: true})
	if err != nil {
		b.Fatal(err)
	}
	us := &v1alpha1.UpdateSource{URL: "http://graph.invalid/v1/graph", Dialect: v1alpha1.FedoraCoreOSGraph, Channel: "stable"}
	start := g.Releases[len(g.Releases)-5].Payload
	pool := &v1alpha1.UpdatePool{Spec: v1alpha1.UpdatePoolSpec{OSImage: start, UpdateSource: us}}
	nodes := make([]nodeView, 1000)
	for i := range nodes {
		nodes[i] = nodeView{name: fmt.Sprint("n", i), selected: true, state: v1alpha1.StepDone, stateTgt: start}
	}
	now := time.Now()
	c := &Controller{opts: Config{Now: time.Now}, sources: newUpdateSources(updategraph.FetchConfig{}, time.Minute, time.Now, slog.Default(), func() {})}
	c.sources.read(graphSource(us))
	st := c.sources.sources[graphSource(us)]
	st.fetched, st.last = true, updategraph.Snapshot{Graph: g, FetchedAt: now}
	b.ResetTimer()
	for b.Loop() {
		offer := c.offerUpdates(context.Background(), pool, nodes, now)
		if offer.retrieved.Status != metav1.ConditionTrue || len(offer.status.Available) == 0 {
			b.Fatalf("offer %+v", offer.retrieved)
		}
	}
}
