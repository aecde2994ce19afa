package updategraph

import (
	"encoding/json"
	"reflect"
	"testing"
	"time"
)

// FuzzParse: Parse never panics; a graph it accepts has every edge inside
// it, reads back the same through MarshalJSON, and NextHops runs from
// each of its releases without an error.
func FuzzParse(f *testing.F) {
	f.Add(readTestdata(f, "openshift/graph.json"))
	f.Add([]byte(smallFCOS))
	f.Add([]byte(conditional(`{"edges":[{"from":"1.0.0","to":"1.0.1"}],"risks":[` + goodRisk + `]}`)))
	f.Fuzz(func(t *testing.T, data []byte) {
		g, err := Parse(data)
		if err != nil {
			return
		}
		for _, e := range g.Edges {
			if e.From < 0 || e.To < 0 || e.From >= len(g.Releases) || e.To >= len(g.Releases) {
				t.Fatalf("edge %v outside %d releases", e, len(g.Releases))
			}
		}
		out, err := json.Marshal(g)
		if err != nil {
			t.Fatalf("marshal: %v", err)
		}
		back, err := Parse(out)
		if err != nil {
			t.Fatalf("parsing what MarshalJSON wrote: %v\n%s", err, out)
		}
		if !reflect.DeepEqual(g, back) {
			t.Fatalf("the graph changed through MarshalJSON and Parse")
		}
		for _, r := range g.Releases {
			if _, err := NextHops(g, []Running{{Node: "n", Version: r.Version}}, Policy{Wariness: 0.5, Now: time.Unix(1784728800, 0)}); err != nil {
				t.Fatalf("NextHops from %s: %v", r.Version, err)
			}
		}
	})
}

// FuzzBuildFCOS: the Fedora CoreOS metadata parsers never panic, and a
// graph built from what they accept is one Parse accepts.
func FuzzBuildFCOS(f *testing.F) {
	f.Add([]byte(`{"releases":[{"version":"1","commits":[{"architecture":"x86_64","checksum":"c1"}]},{"version":"2","commits":[{"architecture":"x86_64","checksum":"c2"}]}]}`),
		[]byte(`{"stream":"stable","releases":[{"version":"2","metadata":{"rollout":{"start_epoch":1,"start_percentage":0.5,"duration_minutes":60}}}]}`))
	f.Add([]byte(`{"releases":[{"version":"1","commits":[{"architecture":"x86_64","checksum":"c1"}]}]}`),
		[]byte(`{"stream":"next","releases":[{"version":"1","metadata":{"deadend":{"reason":""},"barrier":{"reason":"b"}}}]}`))
	f.Fuzz(func(t *testing.T, indexData, updatesData []byte) {
		index, err := ParseReleaseIndex(indexData)
		if err != nil {
			return
		}
		updates, err := ParseUpdates(updatesData)
		if err != nil {
			return
		}
		g, err := BuildFCOS(index, updates, Scope{Arch: "x86_64"})
		if err != nil {
			return
		}
		out, err := json.Marshal(g)
		if err != nil {
			t.Fatalf("marshal: %v", err)
		}
		if _, err := Parse(out); err != nil {
			t.Fatalf("Parse refuses the graph BuildFCOS built: %v\n%s", err, out)
		}
	})
}
