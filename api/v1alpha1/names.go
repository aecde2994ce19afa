package v1alpha1

import (
	"slices"

	corev1 "k8s.io/api/core/v1"
)

// GroupName is the API group of nodeward's own resources and the default
// prefix of its annotations, labels and taint keys.
const GroupName = "nodeward.io"

// The agent liveness Lease: every agent renews one Lease per node so that the
// coordinator can tell a dead agent from a healthy node.
const (
	// AgentLeaseNamespace holds the agents' liveness Leases.
	AgentLeaseNamespace = "nodeward-system"
	// AgentLeasePrefix + node name is the Lease's name.
	AgentLeasePrefix = "nodeward-agent-"
	// AgentLeaseDurationSeconds is how long a Lease stays valid without
	// renewal. Long on purpose: agents renew every 80 s (three tries per
	// duration), which keeps an idle agent under one API write a minute; a
	// dead agent is noticed within four minutes, before the node lifecycle
	// controller's default five-minute eviction.
	AgentLeaseDurationSeconds = 240
)

// AgentLeaseName is the name of the liveness Lease of node.
func AgentLeaseName(node string) string { return AgentLeasePrefix + node }

// Node condition types nodeward owns for host health. They never reuse the
// kubelet's types (MemoryPressure, DiskPressure, PIDPressure) nor
// NetworkUnavailable, which belong to the kubelet and the CNI.
const (
	ConditionMemoryPressure     corev1.NodeConditionType = "NodewardMemoryPressure"
	ConditionDiskPressure       corev1.NodeConditionType = "NodewardDiskPressure"
	ConditionPIDPressure        corev1.NodeConditionType = "NodewardPIDPressure"
	ConditionNetworkUnavailable corev1.NodeConditionType = "NodewardNetworkUnavailable"
	ConditionRuntimeUnavailable corev1.NodeConditionType = "NodewardRuntimeUnavailable"
	// ConditionKernelDeadlock: the kernel logged a task hung in
	// uninterruptible sleep (node-problem-detector's KernelDeadlock).
	ConditionKernelDeadlock corev1.NodeConditionType = "NodewardKernelDeadlock"
	// ConditionReadonlyFilesystem: the kernel remounted a filesystem
	// read-only or shut it down after an error, and it still is
	// (node-problem-detector's ReadonlyFilesystem).
	ConditionReadonlyFilesystem corev1.NodeConditionType = "NodewardReadonlyFilesystem"
)

// HealthConditions lists nodeward's host-health condition types; True means
// unhealthy for each of them.
func HealthConditions() []corev1.NodeConditionType {
	return []corev1.NodeConditionType{
		ConditionMemoryPressure,
		ConditionDiskPressure,
		ConditionPIDPressure,
		ConditionNetworkUnavailable,
		ConditionRuntimeUnavailable,
		ConditionKernelDeadlock,
		ConditionReadonlyFilesystem,
	}
}

// Update-lifecycle condition types on the Node, set by the drain and the agent.
const (
	// ConditionDrainable is False while any pre-drain hook holds the drain.
	ConditionDrainable corev1.NodeConditionType = "Drainable"
	// ConditionDrained is False while a drain is blocked or failed.
	ConditionDrained corev1.NodeConditionType = "Drained"
	// ConditionRebootable is False while any pre-reboot hook holds the reboot.
	ConditionRebootable corev1.NodeConditionType = "Rebootable"
)

// Lifecycle hook annotation prefixes: "<prefix><name>: <owner>" on a Node.
const (
	PreDrainHookPrefix  = "pre-drain.hook.nodeward.io/"
	PreRebootHookPrefix = "pre-reboot.hook.nodeward.io/"
)

// IsHealthCondition reports whether t is one of nodeward's host-health
// condition types.
func IsHealthCondition(t corev1.NodeConditionType) bool {
	return slices.Contains(HealthConditions(), t)
}
