package oracle

import (
	"fmt"
	"testing"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/nodeward/nodeward/api/v1alpha1"
)

// The oracles' definitions as they were before this package, kept here
// only to pin each Rule to what its oracle asserted: every node of
// everyNode must be judged alike by the old definition and its Rule, or,
// for Unavailable, which unites two coordinator-test definitions and adds
// the update's own signs, at least as strictly.

// chaosDisrupted was test/chaos/watcher.go's disrupted.
func chaosDisrupted(n *corev1.Node) bool {
	a := n.Annotations
	if _, ok := a[keyCordonedBy]; ok {
		return true
	}
	switch a[keyState] {
	case "Cordoning", "Draining", "HooksPreReboot", "Finalizing", "Rebooting", "Verifying", "WaitingHealthy",
		"Uncordoning", "Yielding", "RollingBack", "RolledBack":
		return true
	}
	if g := a[keyGrant]; g != "" {
		finished := a[keyState] == "Done" || a[keyState] == "Yielded"
		return !(finished && a[keyStateGrant] == g)
	}
	return false
}

// simDisrupted was test/sim/granter.go's Disrupted.
func simDisrupted(n *corev1.Node) bool {
	if n.Spec.Unschedulable {
		return true
	}
	switch n.Annotations[keyState] {
	case "Cordoning", "Draining", "HooksPreReboot", "Finalizing", "Rebooting", "Verifying",
		"WaitingHealthy", "Uncordoning", "Yielding", "RollingBack", "RolledBack", "Degraded":
		return true
	}
	return false
}

// protosimUpdating was test/protosim/invariants.go's updating.
func protosimUpdating(n *corev1.Node) bool {
	a := n.Annotations
	state := v1alpha1.Step(a[v1alpha1.AnnotationState])
	if g := a[v1alpha1.AnnotationGrant]; g != "" &&
		!((state == v1alpha1.StepDone || state == v1alpha1.StepYielded) && a[v1alpha1.AnnotationStateGrant] == g) {
		return true
	}
	return n.Spec.Unschedulable && (state.Disrupting() || a[v1alpha1.AnnotationCordonedBy] != "")
}

// agentsTestUnavailable was coordinator/agents_test.go's watchUnavailable
// reading of a node.
func agentsTestUnavailable(n *corev1.Node) bool {
	ann := n.Annotations
	grant := ann[v1alpha1.AnnotationGrant]
	step := v1alpha1.Step(ann[v1alpha1.AnnotationState])
	finished := ann[v1alpha1.AnnotationStateGrant] == grant && (step == v1alpha1.StepDone || step == v1alpha1.StepYielded)
	switch {
	case grant != "" && !finished:
		return true
	case n.Spec.Unschedulable:
		return true
	}
	return v1alpha1.NotServing(n) != ""
}

// controllerTestDown was coordinator/controller_test.go's watchInvariant
// reading of a node.
func controllerTestDown(n *corev1.Node) bool {
	grant, granted := n.Annotations[v1alpha1.AnnotationGrant]
	finished := v1alpha1.Step(n.Annotations[v1alpha1.AnnotationState]) == v1alpha1.StepDone &&
		n.Annotations[v1alpha1.AnnotationStateGrant] == grant
	granted = granted && !finished
	ready := false
	for _, c := range n.Status.Conditions {
		if c.Type == corev1.NodeReady {
			ready = c.Status == corev1.ConditionTrue
		}
	}
	return granted || n.Spec.Unschedulable || !ready
}

// everyNode builds a Node for every combination of the fields the
// definitions read.
func everyNode() []*corev1.Node {
	steps := []string{"", "Idle", "Staging", "Staged", "Granted", "HooksPreDrain", "Cordoning", "Draining",
		"HooksPreReboot", "Finalizing", "Rebooting", "Verifying", "WaitingHealthy", "Uncordoning", "Done",
		"Yielding", "Yielded", "RollingBack", "RolledBack", "Degraded", "Unknown"}
	readies := []corev1.ConditionStatus{corev1.ConditionTrue, corev1.ConditionFalse, corev1.ConditionUnknown, ""}
	others := []corev1.NodeCondition{{}, {Type: corev1.NodeDiskPressure, Status: corev1.ConditionTrue},
		{Type: corev1.NodeNetworkUnavailable, Status: corev1.ConditionTrue},
		{Type: corev1.NodeNetworkUnavailable, Status: corev1.ConditionFalse},
		{Type: "NodewardMemoryPressure", Status: corev1.ConditionTrue},
		{Type: "NodewardRuntimeUnavailable", Status: corev1.ConditionTrue},
		{Type: "NodewardMemoryPressure", Status: corev1.ConditionUnknown},
		{Type: corev1.NodeMemoryPressure, Status: corev1.ConditionTrue}}
	var out []*corev1.Node
	for _, step := range steps {
		for _, grant := range []string{"", "g1"} {
			for _, stateGrant := range []string{"", "g1", "g0"} {
				for _, record := range []bool{false, true} {
					for _, cordoned := range []bool{false, true} {
						for _, ready := range readies {
							for _, other := range others {
								a := map[string]string{}
								set := func(k, v string) {
									if v != "" {
										a[k] = v
									}
								}
								set(keyState, step)
								set(keyGrant, grant)
								set(keyStateGrant, stateGrant)
								if record {
									a[keyCordonedBy] = "nodeward"
								}
								n := &corev1.Node{ObjectMeta: metav1.ObjectMeta{Name: fmt.Sprintf("n%d", len(out)), Annotations: a}}
								n.Spec.Unschedulable = cordoned
								if ready != "" {
									n.Status.Conditions = append(n.Status.Conditions, corev1.NodeCondition{Type: corev1.NodeReady, Status: ready})
								}
								if other.Type != "" {
									n.Status.Conditions = append(n.Status.Conditions, other)
								}
								out = append(out, n)
							}
						}
					}
				}
			}
		}
	}
	return out
}

func describe(n *corev1.Node) string {
	return fmt.Sprintf("annotations %v unschedulable %v conditions %v", n.Annotations, n.Spec.Unschedulable, n.Status.Conditions)
}

func TestRulesJudgeAsTheOraclesTheyReplaced(t *testing.T) {
	exact := []struct {
		name string
		rule Rule
		old  func(*corev1.Node) bool
	}{
		{"chaos watcher", UpdateDisruption, chaosDisrupted},
		{"protosim", GrantOrUpdateCordon, protosimUpdating},
		{"sim", CordonOrStep, simDisrupted},
	}
	for _, n := range everyNode() {
		for _, c := range exact {
			if c.rule == GrantOrUpdateCordon && staleStepUnderOtherCordon(n) {
				// The one departure, on purpose: the old definition
				// counted an admin's cordon beside a stale step
				// (TestAdminCordonBesideAStaleStepIsNotTheUpdates).
				if c.rule.Counts(n) {
					t.Errorf("%s: counts an admin's cordon beside a stale step: %s", c.name, describe(n))
				}
				continue
			}
			if got, want := c.rule.Counts(n), c.old(n); got != want {
				t.Errorf("%s: rule %s says %v, the old definition %v, for %s", c.name, c.rule, got, want, describe(n))
			}
		}
		if agentsTestUnavailable(n) && !Unavailable.Counts(n) {
			t.Errorf("Unavailable is looser than coordinator/agents_test.go's watchUnavailable for %s", describe(n))
		}
		// The controller test's stand-in agents never report Yielded; its
		// definition did not take Yielded as finishing a grant, the
		// protocol and every other oracle do.
		yieldedFinished := n.Annotations[keyState] == "Yielded" && n.Annotations[keyStateGrant] == n.Annotations[keyGrant]
		if controllerTestDown(n) && !Unavailable.Counts(n) && !yieldedFinished {
			t.Errorf("Unavailable is looser than coordinator/controller_test.go's watchInvariant for %s", describe(n))
		}
	}
}

// staleStepUnderOtherCordon is a node cordoned without nodeward's record,
// holding no unfinished grant, whose agent reports a disrupting or Degraded
// step for a grant the node does not hold.
func staleStepUnderOtherCordon(n *corev1.Node) bool {
	a := n.Annotations
	step := a[keyState]
	return n.Spec.Unschedulable && a[keyCordonedBy] == "" && (isDisruptingStep(step) || step == "Degraded") &&
		(a[keyGrant] == "" || a[keyStateGrant] != a[keyGrant]) && Read(n)&UnfinishedGrant == 0
}

// TestAdminCordonBesideAStaleStepIsNotTheUpdates is protosim seeds 8675 and
// 19373: a control-plane node's Node object was re-created mid-update (no
// grant, no cordon); its agent reported its old step (Draining,
// HooksPreReboot, for the old grant) on the new object, went back to
// Staged, and that report failed on an API error. An admin then cordoned
// the node while the coordinator had granted another control-plane node:
// the cordon is the admin's, not the update's, and the node serves no less
// than any admin-cordoned node.
func TestAdminCordonBesideAStaleStepIsNotTheUpdates(t *testing.T) {
	for _, step := range []string{"Draining", "HooksPreReboot", "Degraded"} {
		n := &corev1.Node{ObjectMeta: metav1.ObjectMeta{Name: "cp-1", Annotations: map[string]string{
			keyState: step, keyStateGrant: "g1-cp-1"}}}
		n.Spec.Unschedulable = true
		if GrantOrUpdateCordon.Counts(n) {
			t.Errorf("%s for a grant the node no longer holds, admin cordon: counted (%s)", step, GrantOrUpdateCordon.Why(n))
		}
		// The same cordon under the grant the step is for is the
		// update's: the agent drains under an admin's cordon.
		n.Annotations[keyGrant] = "g1-cp-1"
		if got := Read(n); got&UpdateCordon == 0 {
			t.Errorf("%s for the held grant, cordoned: signs %s, want update-cordon", step, got)
		}
		// And nodeward's record makes any cordon the update's.
		delete(n.Annotations, keyGrant)
		n.Annotations[keyCordonedBy] = "nodeward"
		if !GrantOrUpdateCordon.Counts(n) {
			t.Errorf("%s, nodeward's cordon record, no grant: not counted", step)
		}
	}
}

func TestReadNamesEverySign(t *testing.T) {
	n := &corev1.Node{ObjectMeta: metav1.ObjectMeta{Name: "a", Annotations: map[string]string{
		keyGrant: "g2", keyState: "Draining", keyStateGrant: "g2", keyCordonedBy: "nodeward"}}}
	n.Spec.Unschedulable = true
	n.Status.Conditions = []corev1.NodeCondition{{Type: corev1.NodeReady, Status: corev1.ConditionFalse},
		{Type: "NodewardDiskPressure", Status: corev1.ConditionTrue}}
	want := UnfinishedGrant | DisruptingStep | NodewardCordon | UpdateCordon | Cordoned | NotReady | Unhealthy
	if got := Read(n); got != want {
		t.Fatalf("Read = %s, want %s", got, want)
	}
	if got := UpdateDisruption.Why(n).String(); got != "unfinished-grant+disrupting-step+nodeward-cordon" {
		t.Errorf("UpdateDisruption.Why = %q", got)
	}
	if got := Signs(0).String(); got != "none" {
		t.Errorf("no signs: %q", got)
	}
}

func TestFinishedGrantIsNotDisrupted(t *testing.T) {
	for _, step := range []string{"Done", "Yielded"} {
		n := &corev1.Node{ObjectMeta: metav1.ObjectMeta{Name: "a", Annotations: map[string]string{
			keyGrant: "g1", keyState: step, keyStateGrant: "g1"}}}
		n.Status.Conditions = []corev1.NodeCondition{{Type: corev1.NodeReady, Status: corev1.ConditionTrue}}
		if Unavailable.Counts(n) {
			t.Errorf("%s for the grant it holds: counted (%s)", step, Unavailable.Why(n))
		}
		n.Annotations[keyStateGrant] = "g0"
		if !UpdateDisruption.Counts(n) {
			t.Errorf("%s for an older grant: not counted", step)
		}
	}
}

func node(name string, labels map[string]string, step string) *corev1.Node {
	return &corev1.Node{ObjectMeta: metav1.ObjectMeta{Name: name, Labels: labels,
		Annotations: map[string]string{keyState: step}}}
}

func TestPoolExcessNamesTheDisruptedNodes(t *testing.T) {
	nodes := []*corev1.Node{node("c", nil, "Draining"), node("a", nil, "Rebooting"), node("b", nil, "Staged")}
	if e := UpdateDisruption.PoolExcess(nodes, 2); e != nil {
		t.Errorf("two disrupted, limit 2: %s", e)
	}
	e := UpdateDisruption.PoolExcess(nodes, 1)
	if e == nil || e.Limit != 1 || fmt.Sprint(e.Nodes) != "[a c]" {
		t.Fatalf("two disrupted, limit 1: %v", e)
	}
	if got := e.String(); got != "2 nodes disrupted, limit 1: [a c]" {
		t.Errorf("String = %q", got)
	}
}

func TestControlPlaneExcessCountsBothRoleLabels(t *testing.T) {
	cp := map[string]string{controlPlaneLabel: ""}
	master := map[string]string{masterLabel: ""}
	nodes := []*corev1.Node{node("cp-1", cp, "Draining"), node("w-1", nil, "Draining"), node("m-1", master, "Idle")}
	if e := UpdateDisruption.ControlPlaneExcess(nodes); e != nil {
		t.Errorf("one control-plane node disrupted: %s", e)
	}
	nodes[2].Annotations[keyState] = "Verifying"
	e := UpdateDisruption.ControlPlaneExcess(nodes)
	if e == nil || fmt.Sprint(e.Nodes) != "[cp-1 m-1]" {
		t.Errorf("two control-plane nodes disrupted: %v", e)
	}
}

func TestGrantExcessJudgesTheOthers(t *testing.T) {
	nodes := []*corev1.Node{node("new", nil, "Draining"), node("old", nil, "Draining"), node("idle", nil, "Idle")}
	if e := UpdateDisruption.GrantExcess("new", nodes, 2); e != nil {
		t.Errorf("one other disrupted, limit 2: %s", e)
	}
	if e := UpdateDisruption.GrantExcess("new", nodes, 1); e == nil || fmt.Sprint(e.Nodes) != "[old]" {
		t.Errorf("one other disrupted, limit 1: %v", e)
	}
	if e := UpdateDisruption.GrantExcess("idle", nodes[2:], 0); e == nil || len(e.Nodes) != 0 {
		t.Errorf("limit 0: %v, want an Excess with no nodes", e)
	}
}
