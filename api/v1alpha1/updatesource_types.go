package v1alpha1

import metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

// UpdateSource is where a pool's next OS comes from: an update graph served
// over HTTP, in one of two dialects, read for one channel and architecture.
// The coordinator lists the pool's updates in status.updates; with policy
// Automatic it moves spec.osImage to the next recommended hop itself, under
// the pool's usual guardrails (docs/updates.md).
type UpdateSource struct {
	// URL of the graph: an OpenShift update service's graph endpoint, or
	// the Fedora CoreOS update service's graph endpoint (/v1/graph), which
	// serves a stream's releases with their update metadata (barriers,
	// dead-ends, rollouts) as updategraph's Fetcher reads it.
	URL string `json:"url"`
	// Dialect says how to read the graph.
	Dialect UpdateGraphDialect `json:"dialect"`
	// Channel is the OpenShift channel (stable-4.18) or the Fedora CoreOS
	// stream (stable, testing, next).
	Channel string `json:"channel"`
	// Arch is the architecture asked for; amd64 (x86_64) when empty.
	Arch string `json:"arch,omitempty"`
	// Policy says whether the coordinator takes the next recommended hop
	// itself (Automatic) or only lists it (Manual, the default).
	Policy UpdatePolicy `json:"policy,omitempty"`
	// Wariness, in [0, 1], is how late in a Fedora CoreOS staged rollout
	// the pool takes a release: 0 as soon as it starts, 1 once it is
	// complete. A decimal string; 0.5 when empty.
	Wariness string `json:"wariness,omitempty"`
	// Prometheus is the base URL of the Prometheus HTTP API the risks of
	// conditional updates are evaluated against; gates.prometheus when
	// empty. Without either no conditional update is recommended.
	Prometheus string `json:"prometheus,omitempty"`
	// AcceptedRisks are the names of the risks an operator accepted to
	// target a not-recommended update (nodeward upgrade
	// --allow-not-recommended records them). Automatic never takes a
	// not-recommended update.
	AcceptedRisks []string `json:"acceptedRisks,omitempty"`
}

// UpdateGraphDialect is the format of an update graph.
type UpdateGraphDialect string

const (
	// OpenShiftGraph is Cincinnati's graph as the OpenShift update service
	// serves it: nodes, edges and conditional edges with risks.
	OpenShiftGraph UpdateGraphDialect = "OpenShift"
	// FedoraCoreOSGraph is Fedora CoreOS's update metadata: barriers,
	// dead-ends and staged rollouts.
	FedoraCoreOSGraph UpdateGraphDialect = "FedoraCoreOS"
)

// UpdatePolicy says who moves a pool to its next update.
type UpdatePolicy string

const (
	// ManualUpdates lists the updates; an operator picks one (nodeward
	// upgrade --to).
	ManualUpdates UpdatePolicy = "Manual"
	// AutomaticUpdates moves spec.osImage to the next recommended hop.
	AutomaticUpdates UpdatePolicy = "Automatic"
)

// UpdatesStatus is what the update source offers the pool, as a
// ClusterVersion's status lists its available and conditional updates.
type UpdatesStatus struct {
	// Current is the release the pool's nodes run, as the graph knows it;
	// empty when their image is not in the graph.
	Current *UpdateRelease `json:"current,omitempty"`
	// RetrievedAt is when the graph was last fetched and read.
	RetrievedAt *metav1.Time `json:"retrievedAt,omitempty"`
	// Available are the recommended next hops.
	Available []UpdateRelease `json:"available,omitempty"`
	// Conditional are the next hops with known risks, each with its
	// Recommended condition.
	Conditional []ConditionalUpdate `json:"conditional,omitempty"`
	// RolledBack are the releases (images or checksums) that rolled back
	// or failed on a node of the pool while it followed the source, sorted:
	// never offered again, so Automatic never goes back to one after an
	// operator moved the pool off it.
	RolledBack []string `json:"rolledBack,omitempty"`
}

// UpdateRelease is one release of the graph.
type UpdateRelease struct {
	Version string `json:"version"`
	// Image is the release's OS image pinned to its digest.
	Image string `json:"image,omitempty"`
	// URL is the release's notes, when the graph gives them.
	URL string `json:"url,omitempty"`
}

// ConditionalUpdate is a next hop with known risks.
type ConditionalUpdate struct {
	Release UpdateRelease `json:"release"`
	Risks   []UpdateRisk  `json:"risks"`
	// Conditions hold Recommended as the cluster version operator sets it:
	// True (NotExposedToRisks, or AllExposedRisksAccepted), False (the
	// applying risk's name as reason, ExposedToRisks when the name is no
	// valid reason, MultipleReasons for several) or Unknown
	// (EvaluationFailed), with the risks' messages and URLs
	// (docs/update-risks.md).
	Conditions []metav1.Condition `json:"conditions,omitempty"`
}

// UpdateRisk is a risk of a conditional update as the graph names it.
type UpdateRisk struct {
	Name    string `json:"name"`
	Message string `json:"message,omitempty"`
	URL     string `json:"url,omitempty"`
}

// Update condition types and reasons.
const (
	// PoolRetrievedUpdates is True once the graph was fetched and read;
	// False names what failed, and the last good list is kept.
	PoolRetrievedUpdates = "RetrievedUpdates"
	// UpdateRecommended is a conditional update's condition.
	UpdateRecommended = "Recommended"
)
