package v1alpha1

import (
	"slices"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
)

// The node protocol between the coordinator and the agents: annotations on
// each Node (docs/protocol.md). The coordinator writes the first group, the
// agent the second; neither writes the other's keys, but for one removal:
// the agent's report of Done gives back a grant marked
// AnnotationReleaseAtDone (ReleaseKeys).
const (
	protocolPrefix = "update.nodeward.io/"

	// AnnotationTarget is the pool's OS target for the node (coordinator).
	AnnotationTarget = protocolPrefix + "target"
	// AnnotationGrant is present while the node holds a slot; its value
	// names the grant (coordinator).
	AnnotationGrant = protocolPrefix + "grant"
	// AnnotationGrantTarget is the target the grant was issued for,
	// written with the grant and removed with it; an agent refuses a grant
	// issued for another target than the one it is updating to
	// (coordinator).
	AnnotationGrantTarget = protocolPrefix + "grant-target"
	// AnnotationGrantPool names the pool that issued the grant and that
	// releases it, written with the grant and removed with it
	// (coordinator).
	AnnotationGrantPool = protocolPrefix + "grant-pool"
	// AnnotationGrantTerm is the leader term the grant was issued in
	// (LeaderTerm, JSON), written with the grant and removed with it: an
	// agent takes a grant only while the coordinators' leader Lease is
	// still in that term, so a leader deposed while paused cannot disrupt a
	// node with a grant it planned before the pause. Absent when the
	// coordinator runs without leader election (coordinator).
	AnnotationGrantTerm = protocolPrefix + "grant-term"
	// AnnotationReleaseAtDone is "true" when the grant is given back by the
	// agent itself: its report of Done for the grant removes the grant and
	// the keys written with it (ReleaseKeys) in the same write, and the
	// coordinator does not write a release. Written with the grant when the
	// pool keeps no slot after Done (no soak, no canary bake) and removed
	// with it (coordinator; removed by the agent at Done).
	AnnotationReleaseAtDone = protocolPrefix + "release-at-done"
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
	// AnnotationFailuresAcknowledged, on an UpdatePool, is
	// "<configName>:<node>,<node>…": the failures an operator resumed the
	// pool past (`nodeward resume`); the failure budget counts the others.
	// Written for one target only, it means nothing once the target
	// changes.
	AnnotationFailuresAcknowledged = protocolPrefix + "failures-acknowledged"
	// AnnotationHalted, on an UpdatePool, is "<configName>:<message>": the
	// coordinator halted the pool because a gate failed while a node
	// soaked or a canary baked. Like an exhausted failure budget it holds
	// every grant until `nodeward resume` removes it or the target
	// changes (coordinator; removed by the operator).
	AnnotationHalted = protocolPrefix + "halted"
	// AnnotationDepartedNodes, on an UpdatePool, is a JSON object of
	// DepartedNode by node name: nodes whose Node object was deleted while
	// they held an unfinished grant of the pool. Each counts as
	// unavailable (in the pool, and against the one control-plane node)
	// until a Node of its name registers again, serves and carries its
	// agent's report (the update state); an operator whose machine is gone
	// for good removes its entry (coordinator).
	AnnotationDepartedNodes = protocolPrefix + "departed-nodes"
	// AnnotationGrantedNodes, on an UpdatePool, is a JSON object of
	// DepartedNode by node name: the pool's grants, each recorded before it
	// is written (a write-ahead record, its since the grant's time), so
	// that a new leader counts a machine whose Node went while the old
	// leader had not yet recorded the departure. An entry goes once its
	// Node shows the grant gone, its departure is in
	// AnnotationDepartedNodes, or the machine is back (coordinator).
	AnnotationGrantedNodes = protocolPrefix + "granted-nodes"
	// FinalizerGrants, on an UpdatePool, holds a pool that records grants
	// or departed nodes until they settle: the coordinator adds it with
	// its first record and removes it with its last, so that deleting a
	// pool whose machine is down under its grant does not take the record
	// of that machine with it (coordinator).
	FinalizerGrants = protocolPrefix + "grants"
	// AnnotationSoakUntil is when a node that reported Done gives its slot
	// back (RFC 3339): the pool's soak, or a canary's bake, written once
	// when the coordinator first sees Done and removed with the grant
	// (coordinator).
	AnnotationSoakUntil = protocolPrefix + "soak-until"
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

// ReleaseKeys are the keys a grant's release removes, by the coordinator
// or, for a grant with AnnotationReleaseAtDone, by the agent in its Done
// report: the grant and what is written and removed with it.
func ReleaseKeys() []string {
	return []string{AnnotationGrant, AnnotationGrantTarget, AnnotationGrantPool, AnnotationGrantTerm, AnnotationReleaseAtDone,
		AnnotationSoakUntil}
}

// Step names where the update lifecycle of a node stands: the agent writes
// it to AnnotationState and the coordinator reads it. A step names the
// action the agent is taking (or about to take); the agent persists the step
// before the action starts, so after a crash the same action is redone.
type Step string

// The steps of one update, in order, then the terminal and side steps.
const (
	StepIdle           Step = "Idle"           // nothing to do: booted OS is the target
	StepStaging        Step = "Staging"        // downloading and staging the target, finalization locked
	StepStaged         Step = "Staged"         // staged, waiting for a slot
	StepGranted        Step = "Granted"        // the coordinator granted a slot
	StepHooksPreDrain  Step = "HooksPreDrain"  // waiting for pre-drain hooks to be removed
	StepCordoning      Step = "Cordoning"      // marking the node unschedulable
	StepDraining       Step = "Draining"       // evicting pods
	StepHooksPreReboot Step = "HooksPreReboot" // waiting for pre-reboot hooks to be removed
	StepFinalizing     Step = "Finalizing"     // unlocking the staged deployment
	StepRebooting      Step = "Rebooting"      // reboot requested; resumes in Verifying after boot
	StepVerifying      Step = "Verifying"      // checking the booted OS is the target
	StepWaitingHealthy Step = "WaitingHealthy" // waiting for the node to serve again (NodeServing)
	StepUncordoning    Step = "Uncordoning"    // making the node schedulable again (if nodeward cordoned it)
	StepDone           Step = "Done"           // target booted and node back; slot released

	StepYielding    Step = "Yielding"    // drain blocked too long: undoing the cordon to give the slot back
	StepYielded     Step = "Yielded"     // slot given back without updating; retried on a later grant
	StepRollingBack Step = "RollingBack" // verification failed: rolling back and rebooting
	StepRolledBack  Step = "RolledBack"  // booted back into the previous deployment
	StepDegraded    Step = "Degraded"    // needs an operator or a new target; keeps its slot
)

// AllSteps lists every step, for metrics and validation.
func AllSteps() []Step {
	return []Step{StepIdle, StepStaging, StepStaged, StepGranted, StepHooksPreDrain, StepCordoning,
		StepDraining, StepHooksPreReboot, StepFinalizing, StepRebooting, StepVerifying, StepWaitingHealthy,
		StepUncordoning, StepDone, StepYielding, StepYielded, StepRollingBack, StepRolledBack, StepDegraded}
}

// Valid reports whether s is a known step. What the protocol says about
// each step (Disrupting, HoldsSlot, …) is its row in steps.go.
func (s Step) Valid() bool {
	return slices.Contains(AllSteps(), s)
}

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

// DepartedNode is one entry of AnnotationDepartedNodes: the grant the node
// held when its Node object was deleted, since when, and what the
// coordinator's count needs of a node it can no longer read. The entries of
// AnnotationGrantedNodes are the same: what a departure would need, since
// the grant. UID is the
// deleted object's: the machine is back when a Node of its name with
// another UID serves (empty in entries written before it was recorded:
// then any Node of the name that serves).
type DepartedNode struct {
	Grant        string      `json:"grant"`
	UID          types.UID   `json:"uid,omitempty"`
	Since        metav1.Time `json:"since"`
	ControlPlane bool        `json:"controlPlane,omitempty"`
	Zone         string      `json:"zone,omitempty"`
	// Machine is the node's Machine when it departed ("<api>/<namespace>/
	// <name>"; none where no Machine API is served): once that Machine is
	// gone, its machine is deleted for good and never comes back, and the
	// departure ends.
	Machine string `json:"machine,omitempty"`
}
