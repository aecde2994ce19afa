package coordinator

import (
	"maps"
	"time"

	corev1 "k8s.io/api/core/v1"

	"github.com/nodeward/nodeward/api/v1alpha1"
)

// zoneLabel is the well-known failure-domain label.
const zoneLabel = "topology.kubernetes.io/zone"

// nodeView is what the coordinator needs to know about one node, derived
// from the Node object and the agent's liveness Lease.
type nodeView struct {
	name      string
	zone      string
	created   time.Time
	held      bool
	leaseOK   bool // the agent's Lease is present and unexpired
	grant     string
	state     v1alpha1.Step
	stateTgt  string
	stateGrnt string
	staged    string
	target    string
	yieldedAt time.Time
	reason    string
	// down and why are v1alpha1.Unavailable's verdict for the pool's target.
	down bool
	why  string
}

func viewNode(node *corev1.Node, leaseOK bool, target string) nodeView {
	a := node.Annotations
	v := nodeView{
		name:      node.Name,
		zone:      node.Labels[zoneLabel],
		created:   node.CreationTimestamp.Time,
		leaseOK:   leaseOK,
		grant:     a[v1alpha1.AnnotationGrant],
		state:     v1alpha1.Step(a[v1alpha1.AnnotationState]),
		stateTgt:  a[v1alpha1.AnnotationStateTarget],
		stateGrnt: a[v1alpha1.AnnotationStateGrant],
		staged:    a[v1alpha1.AnnotationStaged],
		target:    a[v1alpha1.AnnotationTarget],
		reason:    a[v1alpha1.AnnotationReason],
	}
	_, v.held = a[v1alpha1.AnnotationHold]
	if t, err := time.Parse(time.RFC3339, a[v1alpha1.AnnotationYieldedAt]); err == nil {
		v.yieldedAt = t
	}
	v.down, v.why = v1alpha1.Unavailable(node, v1alpha1.NodeAvailability{Target: target, AgentAlive: leaseOK})
	return v
}

// granted reports whether the node holds a slot.
func (v nodeView) granted() bool { return v.grant != "" }

// updated reports whether the node runs target and is back in service.
func (v nodeView) updated(target string) bool {
	return v.stateTgt == target && (v.state == v1alpha1.StepDone || v.state == v1alpha1.StepIdle)
}

// degraded reports whether the node failed on target.
func (v nodeView) degraded(target string) bool {
	return v.stateTgt == target && v.state == v1alpha1.StepDegraded
}

// unavailable is the pool's disruption count (v1alpha1.Unavailable).
func (v nodeView) unavailable() (bool, string) { return v.down, v.why }

// coordinatorAnnotations are written by the coordinator itself; a change to
// them alone never calls for a new plan.
func isCoordinatorAnnotation(key string) bool {
	switch key {
	case v1alpha1.AnnotationTarget, v1alpha1.AnnotationGrant, v1alpha1.AnnotationGrantTarget, v1alpha1.AnnotationYieldedAt,
		v1alpha1.AnnotationDrainTimeout, v1alpha1.AnnotationYieldOnDrainTimeout, v1alpha1.AnnotationForceOnDrainTimeout:
		return true
	}
	return false
}

// planRelevantChange reports whether an update of a node can change a
// pool's plan: its labels, schedulability, the status of a condition, or an
// annotation the coordinator does not write itself. Heartbeats (condition
// times only) and the coordinator's own writes are not.
func planRelevantChange(old, cur *corev1.Node) bool {
	if old.Spec.Unschedulable != cur.Spec.Unschedulable || !maps.Equal(old.Labels, cur.Labels) {
		return true
	}
	if len(old.Status.Conditions) != len(cur.Status.Conditions) {
		return true
	}
	for i, c := range cur.Status.Conditions {
		o := old.Status.Conditions[i]
		if o.Type != c.Type || o.Status != c.Status {
			return true
		}
	}
	for k, v := range cur.Annotations {
		if !isCoordinatorAnnotation(k) && old.Annotations[k] != v {
			return true
		}
	}
	for k := range old.Annotations {
		if _, ok := cur.Annotations[k]; !ok && !isCoordinatorAnnotation(k) {
			return true
		}
	}
	return false
}
