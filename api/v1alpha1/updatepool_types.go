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
	// Order is the order in which nodes are staged and granted by age
	// (their creationTimestamp): OldestFirst (the default) or NewestFirst.
	// NewestFirst suits a cluster whose autoscaler removes the oldest
	// nodes first, so that the nodes it removes are those not updated yet
	// rather than those just updated. Either way nodes that yielded their
	// slot go after those that never did, and names break ties. With
	// canary.nodes, the canaries are the first nodes in this order.
	Order UpdateOrder `json:"order,omitempty"`
	// Paused stops new grants; updates in flight finish.
	Paused bool `json:"paused,omitempty"`
	// FailureBudget halts the pool once this many of its nodes failed on
	// the current target (Degraded, rolled back), a count or a percentage
	// of the pool's nodes (rounded up, at least 1): nothing more is
	// granted until the target changes or an operator resumes the pool
	// (`nodeward resume`, which acknowledges the failures so far). nil: no
	// budget.
	FailureBudget *intstr.IntOrString `json:"failureBudget,omitempty"`
	// Gates hold new grants while the cluster is unhealthy, as Prometheus
	// or the objects they name see it; they are evaluated before every
	// grant and while nodes soak or canaries bake. nil: no gates.
	Gates *Gates `json:"gates,omitempty"`
	// Soak keeps a node's slot for this long after it reports Done, a Go
	// duration, while the gates are re-checked: a gate failing then halts
	// the pool. Empty: the slot frees at Done.
	Soak string `json:"soak,omitempty"`
	// Canary updates a few nodes first, one at a time, and bakes the last
	// of them before the pool goes on at maxUnavailable.
	Canary *Canary `json:"canary,omitempty"`
	// Silences keep an Alertmanager silence for each node while its
	// update makes it unavailable, so planned reboots do not page.
	Silences *Silences `json:"silences,omitempty"`
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
	// UpdateSource is where the pool's next OS comes from; without it an
	// operator writes osImage by hand.
	UpdateSource *UpdateSource `json:"updateSource,omitempty"`
}

// UpdateOrder is the order in which a pool updates its nodes by age.
type UpdateOrder string

// The orders of spec.order.
const (
	// OldestFirst updates the oldest node first (the default).
	OldestFirst UpdateOrder = "OldestFirst"
	// NewestFirst updates the newest node first.
	NewestFirst UpdateOrder = "NewestFirst"
)

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

// Gates are the health checks a grant waits on. Any answer but a pass
// (Prometheus unreachable, a query error included) holds grants: they fail
// closed.
type Gates struct {
	// Prometheus is the base URL of the Prometheus HTTP API, such as
	// http://prometheus.monitoring.svc:9090; required with Alerts or
	// Queries.
	Prometheus string `json:"prometheus,omitempty"`
	// Alerts selects, by their labels, the firing alerts that hold grants;
	// an empty selector ({}) selects every firing alert; nil checks none.
	Alerts *metav1.LabelSelector `json:"alerts,omitempty"`
	// Queries must each pass: an instant PromQL query that returns at
	// least one sample, every sample within Min and Max when given.
	Queries []GateQuery `json:"queries,omitempty"`
	// Timeout bounds one evaluation of all the gates, a Go duration.
	// Default 5s.
	Timeout string `json:"timeout,omitempty"`
	// Objects must each pass: every object a gate selects satisfies its
	// CEL expression, read from the coordinator's watch of the objects.
	Objects []ObjectGate `json:"objects,omitempty"`
}

// ObjectGate is a CEL check on Kubernetes objects, such as a storage
// cluster's health. The objects are named by resource, not kind: the
// coordinator has no discovery (RESTMapper) to turn a kind into the
// resource its watch needs, and the resource is also what the RBAC rule an
// operator grants names.
type ObjectGate struct {
	// Group is the API group, such as ceph.rook.io; empty for the core
	// group.
	Group string `json:"group,omitempty"`
	// Version is the API version, such as v1.
	Version string `json:"version"`
	// Resource is the plural resource name, such as cephclusters.
	Resource string `json:"resource"`
	// Namespace the objects live in; empty for cluster-scoped objects, or
	// every namespace.
	Namespace string `json:"namespace,omitempty"`
	// Name selects one object, which must exist; or Selector selects by
	// label (nil selector and no name: every object).
	Name     string                `json:"name,omitempty"`
	Selector *metav1.LabelSelector `json:"selector,omitempty"`
	// Expression is CEL over the object, bound as `object` (its
	// unstructured content), that must be true for every selected
	// object, such as `object.status.ceph.health == "HEALTH_OK"`.
	Expression string `json:"expression"`
	// Message says what a failing object means in the pool's status.
	Message string `json:"message,omitempty"`
	// AllowNone passes the gate when no object matches; by default none
	// matching fails.
	AllowNone bool `json:"allowNone,omitempty"`
}

// GateQuery is one PromQL check.
type GateQuery struct {
	// Name names the check in the pool's status; unique in the pool.
	Name string `json:"name"`
	// Query is the PromQL expression, evaluated as an instant query.
	Query string `json:"query"`
	// Min and Max bound every sample's value (inclusive), decimal
	// numbers such as "0" or "0.95". Unset: no bound.
	Min *string `json:"min,omitempty"`
	Max *string `json:"max,omitempty"`
}

// Canary is the first part of a rollout: Nodes (or the nodes Selector
// picks) update one at a time, and the last of them keeps its slot for
// Bake with the gates passing. A canary that fails halts the pool.
type Canary struct {
	// Nodes is a count or a percentage of the pool's nodes (rounded up, at
	// least 1); the first in the grant queue are the canaries.
	Nodes *intstr.IntOrString `json:"nodes,omitempty"`
	// Selector picks the canaries by label instead of Nodes.
	Selector *metav1.LabelSelector `json:"selector,omitempty"`
	// Bake is how long the last canary keeps its slot after Done, a Go
	// duration, the gates re-checked throughout.
	Bake string `json:"bake"`
}

// Silences configure the Alertmanager silences the coordinator keeps.
type Silences struct {
	// Alertmanager is the base URL of Alertmanager (API v2), such as
	// http://alertmanager.monitoring.svc:9093.
	Alertmanager string `json:"alertmanager"`
	// NodeLabel is the alert label that names the node: the silence
	// matches it equal to the node's name, with or without a :port
	// suffix (so "instance" matches "worker-1:9100"). Default "node".
	NodeLabel string `json:"nodeLabel,omitempty"`
	// Matchers narrow each silence further (all must match).
	Matchers []SilenceMatcher `json:"matchers,omitempty"`
	// Required holds a node's grant until its silence exists; by default
	// a silence that cannot be made is reported and the update goes on.
	Required bool `json:"required,omitempty"`
}

// SilenceMatcher is one Alertmanager matcher.
type SilenceMatcher struct {
	Name  string `json:"name"`
	Value string `json:"value"`
	// IsRegex matches Value as a regular expression.
	IsRegex bool `json:"isRegex,omitempty"`
	// NotEqual negates the match.
	NotEqual bool `json:"notEqual,omitempty"`
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
	// Updates is what spec.updateSource offers, when the pool has one.
	Updates *UpdatesStatus `json:"updates,omitempty"`
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
	// PoolGatesPassing says whether the gates passed when last evaluated;
	// its reason and message name the alert or query that failed.
	PoolGatesPassing = "GatesPassing"
	// PoolSilenced is False while a silence the pool needs could not be
	// made or expired in Alertmanager.
	PoolSilenced = "Silenced"
)
