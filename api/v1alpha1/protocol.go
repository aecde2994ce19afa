package v1alpha1

// The node protocol between the coordinator and the agents: annotations on
// each Node (docs/protocol.md). The coordinator writes the first group, the
// agent the second; neither writes the other's keys.
const (
	protocolPrefix = "update.nodeward.io/"

	// AnnotationTarget is the pool's OS target for the node (coordinator).
	AnnotationTarget = protocolPrefix + "target"
	// AnnotationGrant is present while the node holds a slot; its value
	// names the grant (coordinator).
	AnnotationGrant = protocolPrefix + "grant"
	// AnnotationYieldOnDrainTimeout is "true" when a blocked drain gives the
	// slot back (coordinator, from the pool's drain policy).
	AnnotationYieldOnDrainTimeout = protocolPrefix + "yield-on-drain-timeout"
	// AnnotationForceOnDrainTimeout is "true" when a drain blocked past its
	// timeout force-deletes the blocking pods (coordinator, from the pool's
	// drain policy onTimeout: Force, an explicit opt-in).
	AnnotationForceOnDrainTimeout = protocolPrefix + "force-on-drain-timeout"
	// AnnotationDrainTimeout bounds a blocked drain, a Go duration
	// (coordinator).
	AnnotationDrainTimeout = protocolPrefix + "drain-timeout"
	// AnnotationHold, set by an operator, keeps the coordinator from
	// granting the node.
	AnnotationHold = protocolPrefix + "hold"
	// AnnotationYieldedAt records when the node last gave its slot back, so
	// it goes to the back of the queue (coordinator).
	AnnotationYieldedAt = protocolPrefix + "yielded-at"

	// AnnotationState is the agent's current step.
	AnnotationState = protocolPrefix + "state"
	// AnnotationStateTarget is the target the state refers to.
	AnnotationStateTarget = protocolPrefix + "state-target"
	// AnnotationStateGrant is the grant the state refers to.
	AnnotationStateGrant = protocolPrefix + "state-grant"
	// AnnotationStaged is the target staged on the node.
	AnnotationStaged = protocolPrefix + "staged"
	// AnnotationReason says why the node is Degraded, Yielded or waiting.
	AnnotationReason = protocolPrefix + "reason"
	// AnnotationUnavailableSince is when the node became unavailable for
	// the current update (RFC 3339).
	AnnotationUnavailableSince = protocolPrefix + "unavailable-since"
)

// Agent steps the coordinator reads from AnnotationState.
const (
	StepIdle     = "Idle"
	StepStaging  = "Staging"
	StepStaged   = "Staged"
	StepDone     = "Done"
	StepDegraded = "Degraded"
	StepYielded  = "Yielded"
)

// The disruption guard for NoExecute condition taints: a ConfigMap the
// coordinator leader writes and agents read before applying a NoExecute
// taint (docs/protocol.md).
const (
	// GuardConfigMapName lives in AgentLeaseNamespace.
	GuardConfigMapName = "nodeward-disruption-guard"
	// GuardZonePrefix + zone ("_none" for nodes without a zone label) holds
	// GuardAllowed, GuardDenied or GuardRateLimited.
	GuardZonePrefix = "zone."
	// GuardPermitsSuffix: GuardZonePrefix + zone + GuardPermitsSuffix lists,
	// comma-separated, the nodes of a rate-limited zone that may hold a
	// NoExecute taint.
	GuardPermitsSuffix = ".permits"
	// GuardControlPlaneHolder names the one control-plane node that may
	// hold a NoExecute taint ("" for none).
	GuardControlPlaneHolder = "controlplane-holder"

	GuardAllowed     = "Allowed"
	GuardDenied      = "Denied"
	GuardRateLimited = "RateLimited"
	// GuardNoZone stands for nodes without a zone label.
	GuardNoZone = "_none"
)
