package updategraph

import (
	"encoding/json"
	"reflect"
	"strings"
	"testing"
)

func TestParseOpenShiftGraph(t *testing.T) {
	g := openshiftGraph(t)
	if len(g.Releases) != 7 || len(g.Edges) != 9 || len(g.ConditionalEdges) != 4 {
		t.Fatalf("parsed %d nodes, %d edges, %d conditional groups; want 7, 9, 4", len(g.Releases), len(g.Edges), len(g.ConditionalEdges))
	}
	r, ok := g.Release("4.18.0")
	if !ok || !strings.HasPrefix(r.Payload, "quay.io/openshift-release-dev/ocp-release@sha256:") {
		t.Fatalf("release 4.18.0: %+v, found %v", r, ok)
	}
	if r.Metadata["io.openshift.upgrades.graph.release.channels"] != "candidate-4.18,fast-4.18,stable-4.18" {
		t.Errorf("4.18.0's channels: %q", r.Metadata["io.openshift.upgrades.graph.release.channels"])
	}
	risk := g.ConditionalEdges[0].Risks[0]
	if risk.Name != "AROBrokenDNSMasq" || risk.MatchingRules[0].Type != RulePromQL || !strings.Contains(risk.MatchingRules[0].PromQL.PromQL, `name="aro"`) {
		t.Errorf("first risk: %+v", risk)
	}
	if g.ordered {
		t.Error("a graph without age indexes counts as ordered by age")
	}
}

// TestParseRoundTrip: a graph written by MarshalJSON parses back to the
// same graph, for both dialects.
func TestParseRoundTrip(t *testing.T) {
	for name, g := range map[string]*Graph{
		"openshift":   openshiftGraph(t),
		"fcos stable": fcosGraph(t, "stable", Scope{Arch: "x86_64"}),
		"fcos next":   fcosGraph(t, "next", Scope{Arch: "aarch64", OCI: true}),
	} {
		data, err := json.Marshal(g)
		if err != nil {
			t.Fatalf("%s: marshal: %v", name, err)
		}
		back, err := Parse(data)
		if err != nil {
			t.Fatalf("%s: parsing what MarshalJSON wrote: %v", name, err)
		}
		if !reflect.DeepEqual(g, back) {
			t.Errorf("%s: the graph changed through MarshalJSON and Parse", name)
		}
	}
}

const goodNode = `{"version":"1.0.0","payload":"p0","metadata":{}}`

func TestParseErrorsNameTheField(t *testing.T) {
	cases := []struct{ name, graph, want string }{
		{"not JSON", `{"nodes": [`, "graph: invalid JSON"},
		{"trailing data", `{"nodes":[],"edges":[]} x`, "graph: data after the JSON value"},
		{"nodes missing", `{"edges":[]}`, "nodes: missing"},
		{"edges missing", `{"nodes":[]}`, "edges: missing"},
		{"unknown format version", `{"version":2,"nodes":[],"edges":[]}`, "version: graph format 2"},
		{"nodes not an array", `{"nodes":{},"edges":[]}`, "graph.nodes: a JSON object"},
		{"version missing", `{"nodes":[` + goodNode + `,{"payload":"p","metadata":{}}],"edges":[]}`, "nodes[1].version: missing"},
		{"version a number", `{"nodes":[{"version":4,"payload":"p","metadata":{}}],"edges":[]}`, "nodes[0].version: a JSON number"},
		{"payload missing", `{"nodes":[{"version":"1","metadata":{}}],"edges":[]}`, "nodes[0].payload: missing"},
		{"payload empty", `{"nodes":[{"version":"1","payload":" ","metadata":{}}],"edges":[]}`, "nodes[0].payload: empty"},
		{"metadata missing", `{"nodes":[{"version":"1","payload":"p"}],"edges":[]}`, "nodes[0].metadata: missing"},
		{"metadata value not a string", `{"nodes":[{"version":"1","payload":"p","metadata":{"url":3}}],"edges":[]}`, "nodes[0].metadata"},
		{"duplicate version", `{"nodes":[` + goodNode + `,` + goodNode + `],"edges":[]}`, `nodes[1].version: "1.0.0" is also nodes[0]'s`},
		{"edge of three", `{"nodes":[` + goodNode + `],"edges":[[0,0,0]]}`, "edges[0]: 3 indexes, want 2"},
		{"edge out of range", `{"nodes":[` + goodNode + `],"edges":[[0,1]]}`, "edges[0][1]: node index 1 out of range"},
		{"edge negative", `{"nodes":[` + goodNode + `],"edges":[[-1,0]]}`, "edges[0][0]: node index -1 out of range"},
		{"edge fractional", `{"nodes":[` + goodNode + `],"edges":[[0.5,0]]}`, "edges[0]: a JSON number 0.5"},
		{"edge to itself", `{"nodes":[` + goodNode + `],"edges":[[0,0]]}`, "edges[0]: an edge from node 0 to itself"},
		{"age index not a number", `{"nodes":[{"version":"1","payload":"p","metadata":{"` + KeyAgeIndex + `":"x"}}],"edges":[]}`, `nodes[0].metadata["org.fedoraproject.coreos.releases.age_index"]`},
		{"barrier not a bool", `{"nodes":[{"version":"1","payload":"p","metadata":{"` + KeyBarrier + `":"yes"}}],"edges":[]}`, `nodes[0].metadata["org.fedoraproject.coreos.updates.barrier"]: "yes"`},
		{"start value over 1", `{"nodes":[{"version":"1","payload":"p","metadata":{"` + KeyRollout + `":"true","` + KeyStartValue + `":"1.5"}}],"edges":[]}`, "1.5 is outside [0,1]"},
		{"start epoch not an integer", `{"nodes":[{"version":"1","payload":"p","metadata":{"` + KeyStartEpoch + `":"soon"}}],"edges":[]}`, `updates.start_epoch"]: "soon"`},
		{"duration negative", `{"nodes":[{"version":"1","payload":"p","metadata":{"` + KeyDuration + `":"-5"}}],"edges":[]}`, `updates.duration_minutes"]: "-5"`},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			_, err := Parse([]byte(c.graph))
			if err == nil || !strings.Contains(err.Error(), c.want) {
				t.Fatalf("Parse: %v; want an error containing %q", err, c.want)
			}
		})
	}
}

// conditional wraps one conditional group in a graph of releases 1.0.0 and
// 1.0.1.
func conditional(group string) string {
	return `{"nodes":[` + goodNode + `,{"version":"1.0.1","payload":"p1","metadata":{}}],"edges":[],"conditionalEdges":[` + group + `]}`
}

const goodRisk = `{"name":"R","message":"m","url":"https://example.com/r","matchingRules":[{"type":"Always"}]}`

func TestParseConditionalErrorsNameTheField(t *testing.T) {
	edge := `"edges":[{"from":"1.0.0","to":"1.0.1"}]`
	cases := []struct{ name, group, want string }{
		{"edges missing", `{"risks":[` + goodRisk + `]}`, "conditionalEdges[0].edges: missing"},
		{"risks missing", `{` + edge + `}`, "conditionalEdges[0].risks: missing"},
		{"from unknown", `{"edges":[{"from":"0.9","to":"1.0.1"}],"risks":[` + goodRisk + `]}`, `conditionalEdges[0].edges[0].from: "0.9" is not a node`},
		{"to missing", `{"edges":[{"from":"1.0.0"}],"risks":[` + goodRisk + `]}`, "conditionalEdges[0].edges[0].to: missing"},
		{"risk name missing", `{` + edge + `,"risks":[{"message":"m","url":"https://e/","matchingRules":[{"type":"Always"}]}]}`, "conditionalEdges[0].risks[0].name: missing"},
		{"risk names repeated", `{` + edge + `,"risks":[` + goodRisk + `,` + goodRisk + `]}`, `conditionalEdges[0].risks[1].name: "R" is also`},
		{"risk message missing", `{` + edge + `,"risks":[{"name":"R","url":"https://e/","matchingRules":[{"type":"Always"}]}]}`, "risks[0].message: missing"},
		{"risk URL relative", `{` + edge + `,"risks":[{"name":"R","message":"m","url":"/bug","matchingRules":[{"type":"Always"}]}]}`, `risks[0].url: "/bug" is not an absolute URL`},
		{"no rules", `{` + edge + `,"risks":[{"name":"R","message":"m","url":"https://e/","matchingRules":[]}]}`, "risks[0].matchingRules: missing or empty"},
		{"rule type missing", `{` + edge + `,"risks":[{"name":"R","message":"m","url":"https://e/","matchingRules":[{}]}]}`, "risks[0].matchingRules[0].type: missing"},
		{"PromQL without query", `{` + edge + `,"risks":[{"name":"R","message":"m","url":"https://e/","matchingRules":[{"type":"Always"},{"type":"PromQL","promql":{"promql":""}}]}]}`, "risks[0].matchingRules[1].promql.promql: missing"},
		{"rules not an array", `{` + edge + `,"risks":[{"name":"R","message":"m","url":"https://e/","matchingRules":{}}]}`, "conditionalEdges[0].risks.matchingRules: a JSON object"},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			_, err := Parse([]byte(conditional(c.group)))
			if err == nil || !strings.Contains(err.Error(), c.want) {
				t.Fatalf("Parse: %v; want an error containing %q", err, c.want)
			}
		})
	}
	if _, err := Parse([]byte(conditional(`{` + edge + `,"risks":[{"name":"R","message":"m","url":"https://e/","matchingRules":[{"type":"FutureRule"}]}]}`))); err != nil {
		t.Errorf("a rule of an unknown type is refused (the format says to skip it): %v", err)
	}
}
