package updategraph

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/url"
	"strings"
)

// graphFormatVersion is the only version of the graph JSON understood; the
// services that serve no version serve this one.
const graphFormatVersion = 1

// rawGraph is the graph JSON held apart, so that each element is decoded on
// its own and an error names its index.
type rawGraph struct {
	Version          *int               `json:"version"`
	Nodes            *[]json.RawMessage `json:"nodes"`
	Edges            *[]json.RawMessage `json:"edges"`
	ConditionalEdges []json.RawMessage  `json:"conditionalEdges"`
}

// rawNode has pointers to tell a missing field from an empty one.
type rawNode struct {
	Version  *string            `json:"version"`
	Payload  *string            `json:"payload"`
	Metadata *map[string]string `json:"metadata"`
}

type rawConditional struct {
	Edges *[]struct {
		From *string `json:"from"`
		To   *string `json:"to"`
	} `json:"edges"`
	Risks *[]Risk `json:"risks"`
}

// Parse reads and validates an update graph in either dialect. Errors name
// the field and its index (`nodes[3].payload: missing`); a graph with any
// error is refused whole.
func Parse(data []byte) (*Graph, error) {
	var raw rawGraph
	if err := decodeAt("graph", data, &raw); err != nil {
		return nil, err
	}
	if raw.Version != nil && *raw.Version != graphFormatVersion {
		return nil, fmt.Errorf("version: graph format %d is not understood (only %d)", *raw.Version, graphFormatVersion)
	}
	if raw.Nodes == nil {
		return nil, errors.New("nodes: missing")
	}
	if raw.Edges == nil {
		return nil, errors.New("edges: missing")
	}
	g := &Graph{byVersion: make(map[string]int, len(*raw.Nodes))}
	if err := g.parseNodes(*raw.Nodes); err != nil {
		return nil, err
	}
	if err := g.parseEdges(*raw.Edges); err != nil {
		return nil, err
	}
	for i, rc := range raw.ConditionalEdges {
		c, err := g.parseConditional(fmt.Sprintf("conditionalEdges[%d]", i), rc)
		if err != nil {
			return nil, err
		}
		g.ConditionalEdges = append(g.ConditionalEdges, c)
	}
	return g, nil
}

func (g *Graph) parseNodes(nodes []json.RawMessage) error {
	g.ordered = len(nodes) > 0
	for i, rn := range nodes {
		path := fmt.Sprintf("nodes[%d]", i)
		var n rawNode
		if err := decodeAt(path, rn, &n); err != nil {
			return err
		}
		r, err := releaseOf(path, n)
		if err != nil {
			return err
		}
		if j, dup := g.byVersion[r.Version]; dup {
			return fmt.Errorf("%s.version: %q is also nodes[%d]'s: versions must be unique", path, r.Version, j)
		}
		r.Order = i
		hasAge, err := readFCOSMetadata(path, &r)
		if err != nil {
			return err
		}
		g.ordered = g.ordered && hasAge
		g.byVersion[r.Version] = i
		g.Releases = append(g.Releases, r)
	}
	if !g.ordered {
		for i := range g.Releases {
			g.Releases[i].Order = i
		}
	}
	return nil
}

func releaseOf(path string, n rawNode) (Release, error) {
	switch {
	case n.Version == nil:
		return Release{}, fmt.Errorf("%s.version: missing", path)
	case strings.TrimSpace(*n.Version) == "":
		return Release{}, fmt.Errorf("%s.version: empty", path)
	case n.Payload == nil:
		return Release{}, fmt.Errorf("%s.payload: missing", path)
	case strings.TrimSpace(*n.Payload) == "":
		return Release{}, fmt.Errorf("%s.payload: empty: a release without a payload cannot be pinned", path)
	case n.Metadata == nil:
		return Release{}, fmt.Errorf("%s.metadata: missing (an empty object is fine)", path)
	}
	return Release{Version: *n.Version, Payload: *n.Payload, Metadata: *n.Metadata}, nil
}

func (g *Graph) parseEdges(edges []json.RawMessage) error {
	for i, re := range edges {
		path := fmt.Sprintf("edges[%d]", i)
		var pair []int
		if err := decodeAt(path, re, &pair); err != nil {
			return err
		}
		if len(pair) != 2 {
			return fmt.Errorf("%s: %d indexes, want 2 (from, to)", path, len(pair))
		}
		for k, index := range pair {
			if index < 0 || index >= len(g.Releases) {
				return fmt.Errorf("%s[%d]: node index %d out of range: the graph has %d nodes", path, k, index, len(g.Releases))
			}
		}
		if pair[0] == pair[1] {
			return fmt.Errorf("%s: an edge from node %d to itself", path, pair[0])
		}
		g.Edges = append(g.Edges, Edge{From: pair[0], To: pair[1]})
	}
	return nil
}

func (g *Graph) parseConditional(path string, data json.RawMessage) (ConditionalEdges, error) {
	var rc rawConditional
	if err := decodeAt(path, data, &rc); err != nil {
		return ConditionalEdges{}, err
	}
	if rc.Edges == nil || len(*rc.Edges) == 0 {
		return ConditionalEdges{}, fmt.Errorf("%s.edges: missing or empty", path)
	}
	if rc.Risks == nil || len(*rc.Risks) == 0 {
		return ConditionalEdges{}, fmt.Errorf("%s.risks: missing or empty: a conditional edge needs a risk", path)
	}
	var c ConditionalEdges
	for i, e := range *rc.Edges {
		edgePath := fmt.Sprintf("%s.edges[%d]", path, i)
		from, err := g.knownVersion(edgePath+".from", e.From)
		if err != nil {
			return ConditionalEdges{}, err
		}
		to, err := g.knownVersion(edgePath+".to", e.To)
		if err != nil {
			return ConditionalEdges{}, err
		}
		if from == to {
			return ConditionalEdges{}, fmt.Errorf("%s: an edge from %q to itself", edgePath, from)
		}
		c.Edges = append(c.Edges, VersionEdge{From: from, To: to})
	}
	if err := validateRisks(path+".risks", *rc.Risks); err != nil {
		return ConditionalEdges{}, err
	}
	c.Risks = *rc.Risks
	return c, nil
}

func (g *Graph) knownVersion(path string, version *string) (string, error) {
	if version == nil || *version == "" {
		return "", fmt.Errorf("%s: missing", path)
	}
	if _, ok := g.byVersion[*version]; !ok {
		return "", fmt.Errorf("%s: %q is not a node of the graph", path, *version)
	}
	return *version, nil
}

// validateRisks keeps the rules of the cluster version operator's API for
// a risk: a name (unique in its group), a message, an absolute URL and at
// least one matching rule. A rule of an unknown type is kept, as the format
// asks (consumers skip to the next rule); a PromQL rule without a query is
// refused.
func validateRisks(path string, risks []Risk) error {
	names := map[string]int{}
	for i, risk := range risks {
		riskPath := fmt.Sprintf("%s[%d]", path, i)
		if strings.TrimSpace(risk.Name) == "" {
			return fmt.Errorf("%s.name: missing", riskPath)
		}
		if j, dup := names[risk.Name]; dup {
			return fmt.Errorf("%s.name: %q is also %s[%d]'s", riskPath, risk.Name, path, j)
		}
		names[risk.Name] = i
		if strings.TrimSpace(risk.Message) == "" {
			return fmt.Errorf("%s.message: missing", riskPath)
		}
		if u, err := url.Parse(risk.URL); err != nil || u.Scheme == "" || u.Host == "" {
			return fmt.Errorf("%s.url: %q is not an absolute URL", riskPath, risk.URL)
		}
		if err := validateRules(riskPath+".matchingRules", risk.MatchingRules); err != nil {
			return err
		}
	}
	return nil
}

// The matching rule types of the format; others are skipped when evaluated.
const (
	RuleAlways = "Always"
	RulePromQL = "PromQL"
)

func validateRules(path string, rules []MatchingRule) error {
	if len(rules) == 0 {
		return fmt.Errorf("%s: missing or empty: a risk needs a rule", path)
	}
	for i, rule := range rules {
		rulePath := fmt.Sprintf("%s[%d]", path, i)
		if strings.TrimSpace(rule.Type) == "" {
			return fmt.Errorf("%s.type: missing", rulePath)
		}
		if rule.Type == RulePromQL && (rule.PromQL == nil || strings.TrimSpace(rule.PromQL.PromQL) == "") {
			return fmt.Errorf("%s.promql.promql: missing: a PromQL rule needs its query", rulePath)
		}
	}
	return nil
}

// decodeAt decodes data into v, naming path (and the field within) in the
// error: what the JSON held where something else was expected, or where
// the JSON itself is broken.
func decodeAt(path string, data []byte, v any) error {
	dec := json.NewDecoder(bytes.NewReader(data))
	err := dec.Decode(v)
	var typeErr *json.UnmarshalTypeError
	var syntaxErr *json.SyntaxError
	switch {
	case errors.As(err, &typeErr):
		field := path
		if typeErr.Field != "" {
			field += "." + typeErr.Field
		}
		return fmt.Errorf("%s: a JSON %s where a %s is expected", field, typeErr.Value, typeErr.Type)
	case errors.As(err, &syntaxErr):
		return fmt.Errorf("%s: invalid JSON at byte %d: %w", path, syntaxErr.Offset, err)
	case errors.Is(err, io.ErrUnexpectedEOF), errors.Is(err, io.EOF):
		return fmt.Errorf("%s: invalid JSON: it ends early", path)
	case err != nil:
		return fmt.Errorf("%s: %w", path, err)
	}
	if dec.More() {
		return fmt.Errorf("%s: data after the JSON value", path)
	}
	return nil
}
