package v1alpha1

import (
	corev1 "k8s.io/api/core/v1"
)

// This file is the one definition of an unavailable node. The coordinator
// counts unavailable nodes against a pool's maxUnavailable with Unavailable;
// the agent uncordons and reports Done only once NotServing is empty, so a
// node it releases is one the coordinator counts as available again; the
// protocol simulator and the tests check the invariant with the same code.

// servingBlockers are the conditions besides Ready that keep a node out of
// service while True: the kubelet's DiskPressure (pods are evicted), the
// CNI's NetworkUnavailable (pods get no network) and nodeward's own health
// conditions.
func servingBlockers() []corev1.NodeConditionType {
	return append([]corev1.NodeConditionType{corev1.NodeDiskPressure, corev1.NodeNetworkUnavailable}, HealthConditions()...)
}

// NotServing says why node cannot serve workloads, or "" when it can: its
// Ready condition is not True, or a condition of servingBlockers is True.
// Cordons are not looked at: the agent asks this before it uncordons.
func NotServing(node *corev1.Node) string {
	ready := false
	var blocked corev1.NodeConditionType
	for _, c := range node.Status.Conditions {
		if c.Type == corev1.NodeReady {
			ready = c.Status == corev1.ConditionTrue
			continue
		}
		if c.Status == corev1.ConditionTrue && blocked == "" && isServingBlocker(c.Type) {
			blocked = c.Type
		}
	}
	switch {
	case !ready:
		return "not Ready"
	case blocked != "":
		return "unhealthy: " + string(blocked) + " is True"
	}
	return ""
}

func isServingBlocker(t corev1.NodeConditionType) bool {
	for _, b := range servingBlockers() {
		if b == t {
			return true
		}
	}
	return false
}

// NodeAvailability is what decides whether a node counts as unavailable in
// its pool besides the Node object itself.
type NodeAvailability struct {
	// Target is the pool's OS target.
	Target string
	// AgentAlive is true while the node's agent renews its liveness Lease.
	AgentAlive bool
	// Machine says why the Machine beneath the node takes it out of
	// service — being deleted, failed, remediated, claimed twice — or is
	// "" when there is none or it is fine (the coordinator reads Machines
	// where their API is served).
	Machine string
}

// Unavailable reports whether node counts against its pool's
// maxUnavailable, and why: it holds a slot (a grant, or an agent step that
// holds one), its Machine is going away or failed, it does not serve
// (NotServing), it is cordoned, it failed on the pool's target, or its
// agent is silent.
func Unavailable(node *corev1.Node, a NodeAvailability) (bool, string) {
	ann := node.Annotations
	state := Step(ann[AnnotationState])
	switch {
	case ann[AnnotationGrant] != "":
		return true, "updating"
	case state.HoldsSlot() && state != StepDegraded:
		// An agent mid-update whose grant annotation is gone (an edit, a
		// lost write) is still disrupted until it reports otherwise.
		return true, "updating (" + string(state) + ")"
	case a.Machine != "":
		// The machine controller drains, deletes or replaces it whatever
		// the node says now: it is down or about to be.
		return true, a.Machine
	}
	if why := NotServing(node); why != "" {
		return true, why
	}
	switch {
	case node.Spec.Unschedulable:
		return true, "cordoned"
	case state == StepDegraded && ann[AnnotationStateTarget] == a.Target:
		return true, "degraded: " + ann[AnnotationReason]
	case !a.AgentAlive:
		return true, "agent liveness Lease expired or missing"
	}
	return false, ""
}

// DrainBlockers is what blocks the node's drain in progress, from the
// Drained condition the drain publishes within seconds of the first refused
// eviction (the agent's own reason comes only when a drain attempt ends);
// "" when the drain is not blocked.
func DrainBlockers(n *corev1.Node) string {
	for _, c := range n.Status.Conditions {
		if c.Type == ConditionDrained && c.Status == corev1.ConditionFalse && c.Reason == "DrainBlocked" {
			return c.Message
		}
	}
	return ""
}
