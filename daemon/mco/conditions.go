package mco

import (
	"fmt"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/nodeward/nodeward/daemon/update"
)

// The MachineConfigNode condition types the MCD writes (openshift/api
// machineconfiguration/v1), in its order. The node controller counts a
// node updated by Updated (with the ImageModeStatusReporting gate) and
// degraded by NodeDegraded, and stops reading the pool's MachineConfigNodes
// at the first one without conditions: every type is always written.
const (
	CondUpdatePrepared             = "UpdatePrepared"
	CondUpdateExecuted             = "UpdateExecuted"
	CondUpdatePostActionComplete   = "UpdatePostActionComplete"
	CondUpdateComplete             = "UpdateComplete"
	CondResumed                    = "Resumed"
	CondDrained                    = "Drained"
	CondAppliedFilesAndOS          = "AppliedFilesAndOS"
	CondCordoned                   = "Cordoned"
	CondRebootedNode               = "RebootedNode"
	CondUpdated                    = "Updated"
	CondUncordoned                 = "Uncordoned"
	CondNodeDegraded               = "NodeDegraded"
	CondPinnedImageSetsDegraded    = "PinnedImageSetsDegraded"
	CondPinnedImageSetsProgressing = "PinnedImageSetsProgressing"
)

var conditionTypes = []string{CondUpdatePrepared, CondUpdateExecuted, CondUpdatePostActionComplete,
	CondUpdateComplete, CondResumed, CondDrained, CondAppliedFilesAndOS, CondCordoned, CondRebootedNode,
	CondUpdated, CondUncordoned, CondNodeDegraded, CondPinnedImageSetsDegraded, CondPinnedImageSetsProgressing}

// drainerConditions are written by the MCO's drain controller when it
// drains (the handshake): the agent then leaves them alone.
var drainerConditions = map[string]bool{CondCordoned: true, CondDrained: true, CondUncordoned: true,
	CondUpdateComplete: true, CondUpdateExecuted: true}

// progress is how far an update got, in the MCD's phase order.
type progress int

const (
	notStarted progress = iota
	preparing           // checking and staging the config
	prepared            // compatible and staged
	executing           // cordoned, draining, writing files and OS
	applied             // files and OS written, reboot asked
	rebooted            // booted into the config
	resumed             // serving again, uncordoning
	complete            // Done
)

// progressOf is how far the MCD would have got at st's step (mcdSteps).
func progressOf(st update.State) progress { return mcdStepOf(st.Step).progress }

// conditionsFor is the MachineConfigNode's conditions for the machine's
// state st, the reported MCO state and reason, on a node whose desired
// config is desired. ownDrain tells whether nodeward drains (it then writes
// the drain's conditions too).
func conditionsFor(node string, st update.State, state, reason, desired string, ownDrain bool) []metav1.Condition {
	p := progressOf(st)
	c := map[string]metav1.Condition{}
	set := func(t string, status metav1.ConditionStatus, why, msg string) {
		c[t] = metav1.Condition{Type: t, Status: status, Reason: why, Message: msg}
	}
	for _, t := range conditionTypes {
		set(t, metav1.ConditionFalse, "NotYetOccurred", fmt.Sprintf("This node has not yet entered the %s phase", t))
	}
	if p == complete && state == StateDone {
		set(CondUpdated, metav1.ConditionTrue, CondUpdated, fmt.Sprintf("Node %s Updated", node))
		set(CondNodeDegraded, metav1.ConditionFalse, CondNodeDegraded, fmt.Sprintf("Node %s upgrade succeeded", node))
		return ordered(c)
	}
	set(CondUpdated, metav1.ConditionFalse, CondUpdated, fmt.Sprintf("Node %s needs an update", node))
	if p >= prepared {
		set(CondUpdatePrepared, metav1.ConditionTrue, CondUpdatePrepared,
			fmt.Sprintf("Update Compatible. Post Cfg Actions: [] Drain Required: %v", !st.Disruption.NoDrain))
	}
	switch {
	case p >= executing && st.Disruption.NoDrain:
		set(CondUpdateExecuted, metav1.ConditionUnknown, CondDrained, "Node Drain Not required for this update.")
		set(CondDrained, metav1.ConditionTrue, "UpdateExecutedDrained", "Node Drain Not required for this update.")
	case p >= executing && ownDrain:
		setOwnDrain(set, st, p)
	}
	if st.Disruption.NoReboot {
		setApplied(set, st, p)
		setResumed(set, st, p, desired)
		setFailure(set, node, state, reason, desired)
		return ordered(c)
	}
	switch {
	case mcdStepOf(st.Step).applyingOS:
		set(CondAppliedFilesAndOS, metav1.ConditionUnknown, "UpdateExecutedAppliedFilesAndOS",
			"Applying files and new OS config to node.")
	case p >= applied:
		set(CondAppliedFilesAndOS, metav1.ConditionTrue, "UpdateExecutedAppliedFilesAndOS",
			"Applied files and new OS config to node.")
	}
	switch {
	case p == applied:
		set(CondRebootedNode, metav1.ConditionUnknown, CondRebootedNode, "Upgrade requires a reboot.")
	case p > applied:
		set(CondRebootedNode, metav1.ConditionTrue, CondRebootedNode, "Node has rebooted")
	}
	setResumed(set, st, p, desired)
	setFailure(set, node, state, reason, desired)
	return ordered(c)
}

// setter sets one condition.
type setter func(t string, status metav1.ConditionStatus, why, msg string)

// setApplied writes an update applied without a reboot: the files while
// they are written, then the post-config action instead of the reboot.
func setApplied(set setter, st update.State, p progress) {
	switch {
	case mcdStepOf(st.Step).applyingOS:
		set(CondAppliedFilesAndOS, metav1.ConditionUnknown, "UpdateExecutedAppliedFilesAndOS", "Applying files to node.")
	case p > applied:
		set(CondAppliedFilesAndOS, metav1.ConditionTrue, "UpdateExecutedAppliedFilesAndOS", "Applied files to node.")
		set(CondUpdatePostActionComplete, metav1.ConditionTrue, "None", "Changes do not require a reboot")
	}
}

func setResumed(set setter, _ update.State, p progress, desired string) {
	if p >= resumed {
		set(CondResumed, metav1.ConditionTrue, CondResumed,
			fmt.Sprintf("In desired config %s. Resumed normal operations.", desired))
	}
}

func setFailure(set setter, node, state, reason, desired string) {
	switch state {
	case StateUnreconcilable:
		set(CondUpdatePrepared, metav1.ConditionUnknown, CondUpdatePrepared,
			fmt.Sprintf("Update Failed compatibility validation. MachineConfig %s is not compatible. Err: %s", desired, reason))
		fallthrough
	case StateDegraded:
		set(CondNodeDegraded, metav1.ConditionTrue, CondNodeDegraded, fmt.Sprintf("Node %s upgrade failure. %s", node, reason))
	}
}

// setOwnDrain writes the drain's conditions when nodeward drains itself,
// with the drain controller's messages.
func setOwnDrain(set setter, st update.State, p progress) {
	if st.Cordoned || p > executing {
		set(CondCordoned, metav1.ConditionTrue, "UpdateExecutedCordoned", "Cordoned node. The node is reporting Unschedulable = true")
	}
	switch drain := mcdStepOf(st.Step).drain; {
	case drain == drainUnderway:
		set(CondUpdateExecuted, metav1.ConditionUnknown, CondDrained, "Draining Node as part of update executed phase")
		set(CondDrained, metav1.ConditionUnknown, "UpdateExecutedDrained", "Draining node: "+st.Reason)
	case drain == drainDone || p > executing:
		set(CondUpdateExecuted, metav1.ConditionUnknown, CondDrained, "Drained Node as part of update executed phase")
		set(CondDrained, metav1.ConditionTrue, "UpdateExecutedDrained", "Drained node.")
	}
}

func ordered(c map[string]metav1.Condition) []metav1.Condition {
	out := make([]metav1.Condition, 0, len(conditionTypes))
	for _, t := range conditionTypes {
		out = append(out, c[t])
	}
	return out
}
