package coordinator

import (
	"maps"
	"time"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/types"

	"github.com/nodeward/nodeward/api/v1alpha1"
)

// zoneLabel is the well-known failure-domain label.
const zoneLabel = "topology.kubernetes.io/zone"

// controlPlaneRoleLabels mark control-plane nodes; the older "master" role
// counts too.
var controlPlaneRoleLabels = []string{"node-role.kubernetes.io/control-plane", "node-role.kubernetes.io/master"}

// isControlPlane reports whether node carries a control-plane role label.
func isControlPlane(node *corev1.Node) bool {
	for _, l := range controlPlaneRoleLabels {
		if _, ok := node.Labels[l]; ok {
			return true
		}
	}
	return false
}

// nodeView is what the coordinator needs to know about one node, derived
// from the Node object and the agent's liveness Lease.
type nodeView struct {
	name         string
	uid          types.UID // the Node object's: another after a delete and a re-registration
	machine      string    // its Machine's key (machineIndex.keys), "" for none
	rv           string    // the Node's resourceVersion: writes are conditional on it
	zone         string
	controlPlane bool
	created      time.Time
	held         bool
	leaseOK      bool // the agent's Lease is present and unexpired
	grant        string
	// grantTarget is the target the grant is for: the grant-target
	// annotation, or for a grant written before it existed the target
	// annotation, which never changes while a grant is held.
	grantTarget string
	grantPool   string // the grant-pool annotation
	state       v1alpha1.Step
	stateTgt    string
	stateGrnt   string
	staged      string
	target      string
	yieldedAt   time.Time
	// soakUntil is when the node's soak after Done ends; zero before it
	// starts.
	soakUntil time.Time
	reason    string
	// drainPolicy are the node's drain policy annotations (drainPolicyKeys),
	// nil when absent; read only on a granted node, whose agent acts on
	// them.
	drainPolicy [len(drainPolicyKeys)]*string
	// drainBlocked: the node's drain waits on a PDB, a refused eviction or
	// a pre-drain hook (its Drained or Drainable condition says so).
	drainBlocked bool
	// down and why are v1alpha1.Unavailable's verdict for the pool's target.
	down bool
	why  string
	// downFree and whyFree are the same verdict for the node without its
	// grant annotation: how a finished grant's node counts.
	downFree bool
	whyFree  string

	// Set per pool by the snapshot (Controller.input).
	selected bool   // the pool's selector matches the node
	shared   bool   // another pool's selector matches it too: never granted
	owner    string // the pool that releases its grant; "" when unknown
	canary   bool   // the pool's canary selector matches the node
}

// drainPolicyKeys are the annotations of a pool's drain policy, which
// coordinatorKeys writes with every target and grant.
var drainPolicyKeys = [...]string{v1alpha1.AnnotationDrainTimeout, v1alpha1.AnnotationYieldOnDrainTimeout,
	v1alpha1.AnnotationForceOnDrainTimeout}

func viewNode(node *corev1.Node, leaseOK bool, target, machine string) nodeView {
	a := node.Annotations
	v := nodeView{
		name:         node.Name,
		uid:          node.UID,
		rv:           node.ResourceVersion,
		zone:         node.Labels[zoneLabel],
		controlPlane: isControlPlane(node),
		created:      node.CreationTimestamp.Time,
		leaseOK:      leaseOK,
		grant:        a[v1alpha1.AnnotationGrant],
		grantTarget:  a[v1alpha1.AnnotationGrantTarget],
		grantPool:    a[v1alpha1.AnnotationGrantPool],
		state:        v1alpha1.Step(a[v1alpha1.AnnotationState]),
		stateTgt:     a[v1alpha1.AnnotationStateTarget],
		stateGrnt:    a[v1alpha1.AnnotationStateGrant],
		staged:       a[v1alpha1.AnnotationStaged],
		target:       a[v1alpha1.AnnotationTarget],
		reason:       a[v1alpha1.AnnotationReason],
	}
	if v.grantTarget == "" {
		v.grantTarget = v.target
	}
	if v.grant != "" {
		for i, k := range drainPolicyKeys {
			if value, ok := a[k]; ok {
				v.drainPolicy[i] = &value
			}
		}
	}
	_, v.held = a[v1alpha1.AnnotationHold]
	v.drainBlocked = drainBlocked(node)
	v.yieldedAt = parseTime(a[v1alpha1.AnnotationYieldedAt])
	v.soakUntil = parseTime(a[v1alpha1.AnnotationSoakUntil])
	avail := v1alpha1.NodeAvailability{Target: target, AgentAlive: leaseOK, Machine: machine}
	v.down, v.why = v1alpha1.Unavailable(node, avail)
	v.downFree, v.whyFree = v.down, v.why
	if v.granted() {
		v.downFree, v.whyFree = v1alpha1.Unavailable(withoutGrant(node), avail)
	}
	return v
}

// parseTime reads an RFC 3339 annotation; absent or malformed is zero.
// Most nodes have none, and a failed parse allocates its error: at 10,000
// nodes a plan pass spent more on those errors than on the times.
func parseTime(s string) time.Time {
	if s == "" {
		return time.Time{}
	}
	t, err := time.Parse(time.RFC3339, s)
	if err != nil {
		return time.Time{}
	}
	return t
}

// drainBlocked reports whether node's drain is held: Drained False for a
// blocked or refused eviction, or Drainable False for a pre-drain hook.
func drainBlocked(node *corev1.Node) bool {
	for _, c := range node.Status.Conditions {
		switch {
		case c.Status != corev1.ConditionFalse:
		case c.Type == v1alpha1.ConditionDrained && (c.Reason == "DrainBlocked" || c.Reason == "DrainRefused"):
			return true
		case c.Type == v1alpha1.ConditionDrainable:
			return true
		}
	}
	return false
}

// withoutGrant is a shallow copy of node without its grant annotation.
func withoutGrant(node *corev1.Node) *corev1.Node {
	cp := *node
	cp.Annotations = maps.Clone(node.Annotations)
	delete(cp.Annotations, v1alpha1.AnnotationGrant)
	return &cp
}

// granted reports whether the node holds a slot.
func (v nodeView) granted() bool { return v.grant != "" }

// updated reports whether the node runs target and is back in service.
func (v nodeView) updated(target string) bool {
	return v.stateTgt == target && v.state.Settled()
}

// degraded reports whether the node failed on target.
func (v nodeView) degraded(target string) bool {
	return v.stateTgt == target && v.state == v1alpha1.StepDegraded
}

// finished reports whether the agent reported Done or Yielded for the
// grant the node holds: its update is over, the grant is only bookkeeping.
func (v nodeView) finished() bool {
	return v.granted() && v.stateGrnt == v.grant && v.state.Finished()
}

// unavailable is the pool's disruption count (v1alpha1.Unavailable). A
// node whose grant is finished counts as it would without the grant: Done
// means back in service only if the node really serves again (Ready, not
// cordoned, no condition that blocks serving, agent alive).
func (v nodeView) unavailable() (bool, string) {
	if v.finished() {
		if v.downFree {
			return true, "finished its update but " + v.whyFree
		}
		return false, ""
	}
	return v.down, v.why
}

// managed reports whether the pool may write to the node: it selects the
// node and no other pool does.
func (v nodeView) managed() bool { return v.selected && !v.shared }

// coordinatorAnnotations are written by the coordinator itself; a change to
// them alone never calls for a new plan.
func isCoordinatorAnnotation(key string) bool {
	switch key {
	case v1alpha1.AnnotationTarget, v1alpha1.AnnotationGrant, v1alpha1.AnnotationYieldedAt,
		v1alpha1.AnnotationGrantTarget, v1alpha1.AnnotationGrantPool, v1alpha1.AnnotationSoakUntil, v1alpha1.AnnotationReleaseAtDone,
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
