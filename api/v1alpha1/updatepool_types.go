package v1alpha1

import (
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/apimachinery/pkg/util/intstr"
)

// Version is the API version of the types in this package.
const Version = "v1alpha1"

// UpdatePoolResource is the UpdatePool resource, cluster-scoped.
func UpdatePoolResource() schema.GroupVersionResource {
	return schema.GroupVersionResource{Group: GroupName, Version: Version, Resource: "updatepools"}
}

// UpdatePool groups nodes that update to one OS target under one
// disruption budget, like an OpenShift MachineConfigPool.
type UpdatePool struct {
	metav1.TypeMeta   `json:",inline"`
	metav1.ObjectMeta `json:"metadata,omitempty"`

	Spec   UpdatePoolSpec   `json:"spec"`
	Status UpdatePoolStatus `json:"status,omitempty"`
}

// UpdatePoolSpec is what the operator asks for.
type UpdatePoolSpec struct {
	// NodeSelector picks the pool's nodes; pools must not overlap.
	NodeSelector *metav1.LabelSelector `json:"nodeSelector"`
	// OSImage is the target OS image (or OSTree checksum).
	OSImage string `json:"osImage,omitempty"`
	// KernelArguments complete the target.
	KernelArguments []string `json:"kernelArguments,omitempty"`
	// MaxUnavailable is a count or a percentage of the pool's nodes
	// (rounded down, at least 1; "0%" and 0 are 0: nothing is granted).
	// Default 1.
	MaxUnavailable *intstr.IntOrString `json:"maxUnavailable,omitempty"`
	// MaxStaging bounds how many nodes of the pool download (pre-stage)
	// the target at once, to spare the registry and the network; nil
	// means every node at once. Staging needs no slot: a node stages
	// while it is still in service.
	MaxStaging *int32 `json:"maxStaging,omitempty"`
	// Paused stops new grants; updates in flight finish.
	Paused bool `json:"paused,omitempty"`
	// FailureBudget halts the pool once this many of its nodes failed on
	// the current target (Degraded, rolled back): nothing more is granted
	// until the target changes or an operator resumes the pool (`nodeward
	// resume`, which acknowledges the failures so far). nil: no budget.
	FailureBudget *int32 `json:"failureBudget,omitempty"`
	// PauseReason says why the pool is paused (`nodeward pause --reason`);
	// only with Paused. It shows in the Paused condition.
	PauseReason string `json:"pauseReason,omitempty"`
	// ControlPlane marks the control-plane pool: one node at a time,
	// whatever MaxUnavailable says.
	ControlPlane bool `json:"controlPlane,omitempty"`
	// MaintenanceWindows restrict when a node may be granted; none means
	// always.
	MaintenanceWindows []MaintenanceWindow `json:"maintenanceWindows,omitempty"`
	// Drain tunes the agents' drains.
	Drain *DrainSpec `json:"drain,omitempty"`
	// LifecycleHooks are stamped onto a node's annotations when its update
	// starts; their owners remove them.
	LifecycleHooks *LifecycleHooks `json:"lifecycleHooks,omitempty"`
}

// MaintenanceWindow is a recurring period in which grants may start.
type MaintenanceWindow struct {
	// Days are the weekdays (Mon..Sun) the window opens on; empty means
	// every day.
	Days []string `json:"days,omitempty"`
	// Start is the local opening time, "HH:MM".
	Start string `json:"start"`
	// Duration is how long the window stays open, a Go duration such as
	// "4h".
	Duration string `json:"duration"`
	// TimeZone is an IANA zone name; default UTC.
	TimeZone string `json:"timeZone,omitempty"`
}

// DrainSpec tunes the drain of each node.
type DrainSpec struct {
	// Timeout bounds a blocked drain, a Go duration.
	Timeout string `json:"timeout,omitempty"`
	// OnTimeout is Retry (default), Yield or Force.
	OnTimeout string `json:"onTimeout,omitempty"`
}

// LifecycleHooks hold the update of a node at two points.
type LifecycleHooks struct {
	PreDrain  []LifecycleHook `json:"preDrain,omitempty"`
	PreReboot []LifecycleHook `json:"preReboot,omitempty"`
}

// LifecycleHook is one hold, owned by exactly one controller.
type LifecycleHook struct {
	Name  string `json:"name"`
	Owner string `json:"owner"`
}

// UpdatePoolStatus is what the coordinator observed, as `oc get mcp` shows.
type UpdatePoolStatus struct {
	ObservedGeneration      int64  `json:"observedGeneration,omitempty"`
	ConfigName              string `json:"configName,omitempty"`
	MachineCount            int32  `json:"machineCount"`
	UpdatedMachineCount     int32  `json:"updatedMachineCount"`
	ReadyMachineCount       int32  `json:"readyMachineCount"`
	UnavailableMachineCount int32  `json:"unavailableMachineCount"`
	DegradedMachineCount    int32  `json:"degradedMachineCount"`
	// FailedNodes are the nodes that failed on the current target, sorted.
	FailedNodes []string           `json:"failedNodes,omitempty"`
	Conditions  []metav1.Condition `json:"conditions,omitempty"`
}

// Pool condition types.
const (
	PoolUpdated  = "Updated"
	PoolUpdating = "Updating"
	PoolDegraded = "Degraded"
	// PoolPaused is True while spec.paused stops new grants; its message
	// is spec.pauseReason.
	PoolPaused = "Paused"
	// PoolHalted is True while the failure budget stops new grants; its
	// message names the failed nodes.
	PoolHalted = "Halted"
)
