// Package updaterisk decides whether a conditional update is recommended
// for this cluster, with the semantics of OpenShift's cluster version
// operator (CVO; read at openshift/cluster-version-operator commit
// 6e719331fb58, 2026-07-24: pkg/clusterconditions and
// pkg/cvo/availableupdates.go). An update edge of the graph carries
// risks; each risk has matching rules; the rules say whether the cluster
// is exposed.
//
// A risk's rules are tried in order and the first that evaluates decides:
// `Always` matches; a `PromQL` rule's query must return an instant vector
// of exactly one sample valued 0 (not exposed) or 1 (exposed). Anything
// else — no sample, two samples, 2, NaN, a scalar, a query error, an
// unreachable Prometheus, a throttled query with no earlier answer — is a
// failure of that rule, and the next rule is tried. When none evaluates,
// the risk's exposure is unknown.
//
// A candidate's Recommended condition is then built from its risks as the
// CVO builds it: True (NotExposedToRisks) when none applies; False when
// one applies, its reason the risk's name (or ExposedToRisks when the
// name is no valid condition reason); Unknown (EvaluationFailed) when an
// exposure is unknown and none applies; MultipleReasons when reasons mix;
// its message each applying risk's message and URL, and each failure,
// joined by a blank line. A risk named in the accepted set is
// AllExposedRisksAccepted, as the CVO's spec.desiredUpdate.acceptRisks.
//
// PromQL results are cached per rule as the CVO caches them (Throttle): a
// rule is asked again at most once per MinPerRule (an hour), Prometheus
// at most once per MinBetweenQueries (a second) whatever the rule, and the
// one query a pass may make goes to the rule waiting longest, so that
// rules late in the order are not starved. A query is made only for a
// rule that a caller asked for. Evaluate's Unknown results say when to
// ask again (Evaluation.RetryAfter), as the CVO requeues. One deviation,
// fewer queries: when no other rule waits, the CVO queries the rule
// asked for however fresh its answer (a graph with one PromQL rule has
// it queried every pass); DefaultThrottle keeps MinPerRule then too, and
// CVOThrottle is the CVO's behaviour, the benchmarks' reference.
//
// Invalid rules (an unknown type, a PromQL rule without a query, Always
// with one) are dropped and reported, naming the risk and the rule; a
// candidate with a risk left without a valid rule is dropped, as the CVO
// drops it, and reported not recommended. The PromQL itself is checked by
// Prometheus (a failed rule): Prometheus's parser is not linked.
//
// The package is a leaf on updategraph's risk types and gate's Prometheus
// client (gate.Evaluator.Instant); it makes no client of its own.
package updaterisk
