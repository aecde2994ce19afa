// Package oracle is the tests' one definition of a disrupted node and the
// safety invariant built on it (docs/protocol.md): per pool, never more than
// maxUnavailable nodes disrupted, and never more than one control-plane node
// disrupted cluster-wide.
//
// It is deliberately independent of the product: it reads the Node's
// annotations, spec and conditions itself, with the keys and step names
// spelled out from docs/protocol.md, and calls nothing of api/v1alpha1
// (Unavailable, NotServing, Step.Disrupting, HoldsSlot). A mistake in the
// product's definition then cannot hide itself in the tests that check it.
//
// A node shows Signs (Read); a Rule is the set of signs an oracle counts.
// The oracles differ in what they can see and what the system under test
// can know in time (an admin's cordon, a machine going down, a Node object
// re-created under a running agent), so each names the Rule it checks with;
// the Rules below are the only ones, and each says who uses it and why.
package oracle

import (
	"fmt"
	"slices"
	"strings"

	corev1 "k8s.io/api/core/v1"
)

// The protocol keys and labels the oracle reads, spelled out from
// docs/protocol.md on purpose (see the package doc).
const (
	keyGrant          = "update.nodeward.io/grant"
	keyState          = "update.nodeward.io/state"
	keyStateGrant     = "update.nodeward.io/state-grant"
	keyCordonedBy     = "update.nodeward.io/cordoned-by"
	controlPlaneLabel = "node-role.kubernetes.io/control-plane"
	masterLabel       = "node-role.kubernetes.io/master"
	// healthConditionPrefix starts the type of every nodeward health
	// condition (NodewardMemoryPressure, …); no other condition nodeward
	// writes has it.
	healthConditionPrefix = "Nodeward"
)

// Signs is a set of ways a node shows a disruption; a Rule is the Signs an
// oracle counts.
type Signs uint

// Rule is the set of Signs that make a node count as disrupted.
type Rule = Signs

// Each sign is read from the Node alone.
const (
	// UnfinishedGrant: the node holds a grant its agent has not reported
	// Done or Yielded for (state-grant naming that grant). The coordinator
	// may write the next grants before it removes a finished node's grant,
	// and that node is back in service.
	UnfinishedGrant Signs = 1 << iota
	// DisruptingStep: the agent reports a step from Cordoning to
	// Uncordoning, or a side step between them (Yielding, RollingBack,
	// RolledBack). Degraded is DegradedStep.
	DisruptingStep
	// DegradedStep: the agent reports Degraded. It is a sign of its own
	// because a Degraded node whose pool moved to another target is
	// released and retargeted, and no longer counted by the coordinator.
	DegradedStep
	// NodewardCordon: nodeward's cordon record (cordoned-by) is on the
	// node, whether or not spec.unschedulable still shows the cordon.
	NodewardCordon
	// UpdateCordon: the node is cordoned (spec.unschedulable) and the
	// cordon is the update's: nodeward's record is on it, or its agent
	// reports DisruptingStep or DegradedStep for the grant the node holds
	// (state-grant = grant). The agent cordons without writing its record
	// only under a cordon that was there first (an admin's), and then it
	// drains under a grant. A step reported for a grant the node no longer
	// holds is stale: the Node was re-created (no grant, no cordon) and
	// the agent's next report (back to Staged) has not landed yet. An
	// admin's cordon on such a node is an outside cause, not the update's.
	UpdateCordon
	// Cordoned: spec.unschedulable, whoever set it (an admin too).
	Cordoned
	// NotReady: the Ready condition is not True, or missing.
	NotReady
	// Unhealthy: DiskPressure, NetworkUnavailable or a nodeward health
	// condition is True.
	Unhealthy
)

// The Rules the oracles use.
const (
	// UpdateDisruption is a node taken out of service by an update, and
	// nothing else: a grant not yet finished, a disrupting step, or
	// nodeward's cordon record. It leaves out what the coordinator cannot
	// see in time (an admin's cordon, a machine going down) and a Degraded
	// node a retarget freed. Used by the chaos watcher (test/chaos), which
	// injects exactly those faults on a real control plane.
	UpdateDisruption Rule = UnfinishedGrant | DisruptingStep | NodewardCordon

	// GrantOrUpdateCordon counts a grant not yet finished, or a cordon
	// that is the update's (UpdateCordon). A step name alone does not
	// count, nor a cordon beside a step reported for a grant the node no
	// longer holds: the protocol simulator (test/protosim) re-creates Node
	// objects under running agents, which then report a disrupting step on
	// an object neither cordoned nor granted, and an admin may cordon it
	// before the agent's next report; a reboot of such a node is the
	// simulator's reboot check's to catch.
	GrantOrUpdateCordon Rule = UnfinishedGrant | UpdateCordon

	// CordonOrStep counts any cordon and any step from Cordoning on,
	// Degraded included, and no grant: a granted node that has not started
	// to cordon still serves. Used where agents run against the stand-in
	// Granter (test/sim: test/e2e, test/demo, test/bench/fleet), whose
	// tests never retarget a Degraded node and count an admin's cordon too.
	CordonOrStep Rule = Cordoned | DisruptingStep | DegradedStep

	// Unavailable adds the outside causes to UpdateDisruption: any cordon,
	// and a node that does not serve (NotReady, Unhealthy). Used by the
	// coordinator's tests (coordinator/*_test.go), whose stand-in agents
	// and injected conditions the coordinator always sees before it plans.
	Unavailable Rule = UpdateDisruption | Cordoned | NotReady | Unhealthy
)

// isDisruptingStep reports whether step is one of the agent's steps from
// the cordon to the uncordon, or a side step between them
// (docs/protocol.md, "A slot's life"; api/v1alpha1/protocol.go names them).
func isDisruptingStep(step string) bool {
	switch step {
	case "Cordoning", "Draining", "HooksPreReboot", "Finalizing", "Rebooting", "Verifying",
		"WaitingHealthy", "Uncordoning", "Yielding", "RollingBack", "RolledBack":
		return true
	}
	return false
}

// Read returns every sign node shows.
func Read(node *corev1.Node) Signs {
	a := node.Annotations
	var s Signs
	if g := a[keyGrant]; g != "" {
		finished := (a[keyState] == "Done" || a[keyState] == "Yielded") && a[keyStateGrant] == g
		if !finished {
			s |= UnfinishedGrant
		}
	}
	step := a[keyState]
	if isDisruptingStep(step) {
		s |= DisruptingStep
	}
	if step == "Degraded" {
		s |= DegradedStep
	}
	if _, ok := a[keyCordonedBy]; ok {
		s |= NodewardCordon
	}
	if node.Spec.Unschedulable {
		s |= Cordoned
		stepOfHeldGrant := s&(DisruptingStep|DegradedStep) != 0 &&
			a[keyGrant] != "" && a[keyStateGrant] == a[keyGrant]
		if s&NodewardCordon != 0 || stepOfHeldGrant {
			s |= UpdateCordon
		}
	}
	return s | readConditions(node)
}

// readConditions returns the NotReady and Unhealthy signs.
func readConditions(node *corev1.Node) Signs {
	s := NotReady
	for _, c := range node.Status.Conditions {
		switch {
		case c.Type == corev1.NodeReady:
			if c.Status == corev1.ConditionTrue {
				s &^= NotReady
			}
		case c.Status != corev1.ConditionTrue:
		case c.Type == corev1.NodeDiskPressure, c.Type == corev1.NodeNetworkUnavailable,
			strings.HasPrefix(string(c.Type), healthConditionPrefix):
			s |= Unhealthy
		}
	}
	return s
}

// Counts reports whether node is disrupted under r.
func (r Rule) Counts(node *corev1.Node) bool {
	return Read(node)&r != 0
}

// Why is the signs node shows that r counts, for a violation's message.
func (r Rule) Why(node *corev1.Node) Signs {
	return Read(node) & r
}

// String names the signs in s, "+"-separated ("none" for none).
func (s Signs) String() string {
	names := [...]string{"unfinished-grant", "disrupting-step", "degraded", "nodeward-cordon",
		"update-cordon", "cordoned", "not-ready", "unhealthy"}
	var parts []string
	for i, name := range names {
		if s&(1<<i) != 0 {
			parts = append(parts, name)
		}
	}
	if len(parts) == 0 {
		return "none"
	}
	return strings.Join(parts, "+")
}

// IsControlPlane reports whether node is a control-plane node: it carries
// the control-plane or the legacy master role label.
func IsControlPlane(node *corev1.Node) bool {
	_, cp := node.Labels[controlPlaneLabel]
	_, master := node.Labels[masterLabel]
	return cp || master
}

// Excess is a broken budget: Nodes (sorted) are disrupted, and Limit
// allows fewer of them than the check needed.
type Excess struct {
	Limit int
	Nodes []string
}

func (e *Excess) String() string {
	return fmt.Sprintf("%d nodes disrupted, limit %d: %v", len(e.Nodes), e.Limit, e.Nodes)
}

// Disrupted returns, sorted, the names of the nodes r counts as disrupted.
func (r Rule) Disrupted(nodes []*corev1.Node) []string {
	var out []string
	for _, n := range nodes {
		if r.Counts(n) {
			out = append(out, n.Name)
		}
	}
	slices.Sort(out)
	return out
}

// PoolExcess checks a pool at one moment: more than maxUnavailable of its
// nodes disrupted is an Excess; nil when within the budget.
func (r Rule) PoolExcess(nodes []*corev1.Node, maxUnavailable int) *Excess {
	if down := r.Disrupted(nodes); len(down) > maxUnavailable {
		return &Excess{Limit: maxUnavailable, Nodes: down}
	}
	return nil
}

// ControlPlaneExcess checks the cluster at one moment: more than one
// control-plane node among nodes disrupted is an Excess; nil otherwise.
func (r Rule) ControlPlaneExcess(nodes []*corev1.Node) *Excess {
	var cp []*corev1.Node
	for _, n := range nodes {
		if IsControlPlane(n) {
			cp = append(cp, n)
		}
	}
	return r.PoolExcess(cp, 1)
}

// GrantExcess checks a grant on the node named granted: it fits only when
// fewer than maxUnavailable of the other nodes counted against the same
// budget are disrupted. It returns those others when they are not fewer
// (with a limit of 0 every grant is an Excess, with no nodes); nil when the
// grant fits. granted itself is skipped if it is among nodes.
func (r Rule) GrantExcess(granted string, nodes []*corev1.Node, maxUnavailable int) *Excess {
	var others []*corev1.Node
	for _, n := range nodes {
		if n.Name != granted {
			others = append(others, n)
		}
	}
	if down := r.Disrupted(others); len(down) >= maxUnavailable {
		return &Excess{Limit: maxUnavailable, Nodes: down}
	}
	return nil
}
