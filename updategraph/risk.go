package updategraph

// Risk is a known risk of a conditional update edge, as the update service
// serves it: the cluster is exposed when its matching rules say so.
type Risk struct {
	Name          string         `json:"name"`
	Message       string         `json:"message"`
	URL           string         `json:"url"`
	MatchingRules []MatchingRule `json:"matchingRules"`
}

// MatchingRule is one of a risk's rules, evaluated in order: the first that
// evaluates decides whether the cluster is exposed.
type MatchingRule struct {
	Type   string       `json:"type"`
	PromQL *PromQLQuery `json:"promql,omitempty"`
}

// PromQLQuery is a PromQL matching rule: its query must return exactly one
// sample, valued 0 (not exposed) or 1 (exposed).
type PromQLQuery struct {
	PromQL string `json:"promql"`
}
