package coordinator

import (
	"fmt"
	"slices"
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/intstr"

	"github.com/nodeward/nodeward/api/v1alpha1"
)

func pool(mu intstr.IntOrString, mut ...func(*v1alpha1.UpdatePoolSpec)) *v1alpha1.UpdatePool {
	p := &v1alpha1.UpdatePool{ObjectMeta: metav1.ObjectMeta{Name: "p"}, Spec: v1alpha1.UpdatePoolSpec{
		OSImage: "quay.io/os:2", MaxUnavailable: &mu,
	}}
	for _, m := range mut {
		m(&p.Spec)
	}
	return p
}

// fleet is a set of Nodes as the coordinator's cache would hold them; tests
// change the Nodes and plan over fresh views, so that the plan sees what
// v1alpha1.Unavailable makes of real objects.
type fleet []*corev1.Node

func healthy(n int, zones ...string) fleet {
	base := time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)
	out := make(fleet, n)
	for i := range out {
		node := &corev1.Node{
			ObjectMeta: metav1.ObjectMeta{Name: fmt.Sprintf("n%02d", i), Labels: map[string]string{},
				CreationTimestamp: metav1.NewTime(base.Add(time.Duration(i) * time.Minute)),
				Annotations: map[string]string{
					v1alpha1.AnnotationTarget: "quay.io/os:2", v1alpha1.AnnotationStaged: "quay.io/os:2",
				}},
			Status: corev1.NodeStatus{Conditions: []corev1.NodeCondition{{Type: corev1.NodeReady, Status: corev1.ConditionTrue}}},
		}
		if len(zones) > 0 {
			node.Labels[zoneLabel] = zones[i%len(zones)]
		}
		out[i] = node
	}
	return out
}

// views are the nodes as the plan of a pool with target "quay.io/os:2" sees
// them; the named nodes' agents are silent.
func (f fleet) views(silent ...string) []nodeView {
	out := make([]nodeView, len(f))
	for i, n := range f {
		out[i] = viewNode(n, !slices.Contains(silent, n.Name), "quay.io/os:2", "")
		out[i].selected, out[i].owner = true, "p"
	}
	return out
}

// annotate sets annotations of node i ("" removes one).
func (f fleet) annotate(i int, kv ...string) {
	for j := 0; j+1 < len(kv); j += 2 {
		if kv[j+1] == "" {
			delete(f[i].Annotations, kv[j])
			continue
		}
		f[i].Annotations[kv[j]] = kv[j+1]
	}
}

// plan plans pool over nodes, all of them selected by pool alone.
func plan(p *v1alpha1.UpdatePool, nodes []nodeView, pending map[string]bool, at time.Time) (*poolPlan, error) {
	return planPool(planInput{pool: p, nodes: nodes, pending: pending, now: at})
}

var now = time.Date(2026, 11, 22, 12, 0, 0, 0, time.UTC) // a Sunday

func TestMaxUnavailableResolution(t *testing.T) {
	for _, tc := range []struct {
		mu   intstr.IntOrString
		cp   bool
		n    int
		want int
	}{
		{intstr.FromInt32(3), false, 10, 3},
		{intstr.FromString("20%"), false, 50, 10},
		{intstr.FromString("20%"), false, 4, 1}, // rounds down to 0, minimum 1
		{intstr.FromString("0%"), false, 10, 0}, // 0% is 0, not the minimum of 1
		{intstr.FromString("1%"), false, 10, 1}, // rounds down to 0, minimum 1
		{intstr.FromInt32(0), false, 10, 0},
		{intstr.FromInt32(5), true, 10, 1}, // control plane: one at a time
		{intstr.FromString("100%"), true, 3, 1},
	} {
		got, err := MaxUnavailable(pool(tc.mu, func(s *v1alpha1.UpdatePoolSpec) { s.ControlPlane = tc.cp }).Spec, tc.n)
		if err != nil || got != tc.want {
			t.Errorf("MaxUnavailable(%v, cp=%v, n=%d) = %d, %v; want %d", tc.mu.String(), tc.cp, tc.n, got, err, tc.want)
		}
	}
	for _, bad := range []intstr.IntOrString{intstr.FromString("120%"), intstr.FromString("ten"), intstr.FromInt32(-1)} {
		if _, err := MaxUnavailable(pool(bad).Spec, 10); err == nil {
			t.Errorf("MaxUnavailable(%s): want an error", bad.String())
		}
	}
}

func TestPlanGrantsUpToBudgetAndCountsUnavailable(t *testing.T) {
	nodes := healthy(10)
	nodes[0].Status.Conditions[0].Status = corev1.ConditionFalse                           // counts against the budget
	nodes.annotate(1, v1alpha1.AnnotationGrant, "g", v1alpha1.AnnotationState, "Draining") // updating
	p, err := plan(pool(intstr.FromInt32(3)), nodes.views(), map[string]bool{"n02": true}, now)
	if err != nil {
		t.Fatal(err)
	}
	if len(p.unavailable) != 3 || len(p.grant) != 0 {
		t.Fatalf("3 unavailable (not Ready, granted, pending) of 3: want no grant, got unavailable=%v grant=%v", p.unavailable, p.grant)
	}
	p, _ = plan(pool(intstr.FromInt32(5)), nodes.views(), map[string]bool{"n02": true}, now)
	if len(p.grant) != 2 || p.grant[0] != "n03" || p.grant[1] != "n04" {
		t.Fatalf("budget 5 with 3 unavailable: want the two oldest (n03, n04), got %v", p.grant)
	}
}

func TestPlanSkipsAdminCordonedHeldSilentAndPaused(t *testing.T) {
	nodes := healthy(4)
	nodes[0].Spec.Unschedulable = true // by an admin: no cordoned-by record
	nodes.annotate(1, v1alpha1.AnnotationHold, "maintenance")
	p, _ := plan(pool(intstr.FromInt32(10)), nodes.views("n02"), nil, now)
	if len(p.grant) != 1 || p.grant[0] != "n03" {
		t.Fatalf("want only n03 granted, got %v", p.grant)
	}
	p, _ = plan(pool(intstr.FromInt32(10), func(s *v1alpha1.UpdatePoolSpec) { s.Paused = true }), healthy(3).views(), nil, now)
	if len(p.grant) != 0 || p.hold.message != "pool is paused" {
		t.Fatalf("paused pool: want no grant, got %v (%q)", p.grant, p.hold.message)
	}
}

func TestPlanConfinesGrantsToOneZoneAndGrantsOnlyStaged(t *testing.T) {
	nodes := healthy(6, "b", "a")
	nodes.annotate(3, v1alpha1.AnnotationStaged, "") // zone a, still downloading: not granted
	p, _ := plan(pool(intstr.FromInt32(4)), nodes.views(), nil, now)
	// No zone busy: zone "a" comes first by name; its nodes are n01 n03 n05.
	if fmt.Sprint(p.grant) != "[n01 n05]" {
		t.Fatalf("want zone a only, oldest first, staged only, got %v", p.grant)
	}
	nodes.annotate(0, v1alpha1.AnnotationGrant, "g") // zone b busy now
	p, _ = plan(pool(intstr.FromInt32(4)), nodes.views(), nil, now)
	if fmt.Sprint(p.grant) != "[n02 n04]" {
		t.Fatalf("zone b busy: want n02 and n04, got %v", p.grant)
	}
}

func TestPlanWaitsForStaging(t *testing.T) {
	nodes := healthy(3)
	for i := range nodes {
		nodes.annotate(i, v1alpha1.AnnotationStaged, "")
	}
	p, _ := plan(pool(intstr.FromInt32(2)), nodes.views(), nil, now)
	if len(p.grant) != 0 || p.hold.message != "3 nodes still staging the target" {
		t.Fatalf("nothing staged: grant %v waiting %q; want no grant, waiting for 3 nodes to stage", p.grant, p.hold.message)
	}
	nodes.annotate(2, v1alpha1.AnnotationStaged, "quay.io/os:2")
	p, _ = plan(pool(intstr.FromInt32(2)), nodes.views(), nil, now)
	if fmt.Sprint(p.grant) != "[n02]" {
		t.Fatalf("n02 staged: grant %v, want [n02]", p.grant)
	}
}

func TestPlanReleasesDoneAndYieldedAndQueuesYieldedLast(t *testing.T) {
	nodes := healthy(3)
	for i, state := range []string{"Done", "Yielded"} {
		nodes.annotate(i, v1alpha1.AnnotationGrant, "g", v1alpha1.AnnotationStateGrant, "g",
			v1alpha1.AnnotationStateTarget, "quay.io/os:2", v1alpha1.AnnotationState, state)
	}
	p, _ := plan(pool(intstr.FromInt32(1)), nodes.views(), nil, now)
	if fmt.Sprint(p.release) != "[n00 n01]" || fmt.Sprint(p.yielded) != "[n01]" {
		t.Fatalf("release=%v yielded=%v", p.release, p.yielded)
	}
	fresh := healthy(3)
	fresh.annotate(0, v1alpha1.AnnotationYieldedAt, now.Add(-time.Minute).Format(time.RFC3339))
	p, _ = plan(pool(intstr.FromInt32(1)), fresh.views(), nil, now)
	if fmt.Sprint(p.grant) != "[n01]" {
		t.Fatalf("a node that yielded goes to the back of the queue: got %v", p.grant)
	}
}

func TestPlanHonoursMaintenanceWindows(t *testing.T) {
	win := func(days []string, start, dur, tz string) *v1alpha1.UpdatePool {
		return pool(intstr.FromInt32(1), func(s *v1alpha1.UpdatePoolSpec) {
			s.MaintenanceWindows = []v1alpha1.MaintenanceWindow{{Days: days, Start: start, Duration: dur, TimeZone: tz}}
		})
	}
	for _, tc := range []struct {
		p    *v1alpha1.UpdatePool
		open bool
	}{
		{win(nil, "11:00", "2h", ""), true},
		{win(nil, "13:00", "2h", ""), false},
		{win([]string{"Sat"}, "22:00", "16h", ""), true}, // opened yesterday, still open
		{win([]string{"Mon"}, "11:00", "2h", ""), false},
		{win(nil, "12:30", "1h", "Europe/Berlin"), true}, // 12:00 UTC is 13:00 in Berlin: open there, not in UTC
	} {
		p, err := plan(tc.p, healthy(1).views(), nil, now)
		if err != nil {
			t.Fatal(err)
		}
		if got := len(p.grant) == 1; got != tc.open {
			w := tc.p.Spec.MaintenanceWindows[0]
			t.Errorf("window %v %s+%s %s at %s: granted=%v, want %v", w.Days, w.Start, w.Duration, w.TimeZone, now, got, tc.open)
		}
	}
	_, err := plan(win(nil, "11:00", "2h", "Mars/Olympus"), healthy(1).views(), nil, now)
	if err == nil {
		t.Fatal("unknown time zone: want an error naming it")
	}
}

func TestPlanRelevantChangeIgnoresOwnWritesAndHeartbeats(t *testing.T) {
	base := func() *corev1.Node {
		return &corev1.Node{
			ObjectMeta: metav1.ObjectMeta{Name: "n", Labels: map[string]string{"a": "b"},
				Annotations: map[string]string{v1alpha1.AnnotationState: "Staged"}},
			Status: corev1.NodeStatus{Conditions: []corev1.NodeCondition{{Type: corev1.NodeReady, Status: corev1.ConditionTrue}}},
		}
	}
	for name, tc := range map[string]struct {
		mutate func(*corev1.Node)
		want   bool
	}{
		"own grant":         {func(n *corev1.Node) { n.Annotations[v1alpha1.AnnotationGrant] = "g" }, false},
		"own target":        {func(n *corev1.Node) { n.Annotations[v1alpha1.AnnotationTarget] = "os:2" }, false},
		"heartbeat":         {func(n *corev1.Node) { n.Status.Conditions[0].LastHeartbeatTime = metav1.Now() }, false},
		"agent state":       {func(n *corev1.Node) { n.Annotations[v1alpha1.AnnotationState] = "Done" }, true},
		"agent state gone":  {func(n *corev1.Node) { delete(n.Annotations, v1alpha1.AnnotationState) }, true},
		"not ready":         {func(n *corev1.Node) { n.Status.Conditions[0].Status = corev1.ConditionFalse }, true},
		"cordon":            {func(n *corev1.Node) { n.Spec.Unschedulable = true }, true},
		"label":             {func(n *corev1.Node) { n.Labels["zone"] = "z" }, true},
		"new condition":     {func(n *corev1.Node) { n.Status.Conditions = append(n.Status.Conditions, corev1.NodeCondition{}) }, true},
		"operator hold set": {func(n *corev1.Node) { n.Annotations[v1alpha1.AnnotationHold] = "x" }, true},
	} {
		cur := base()
		tc.mutate(cur)
		if got := planRelevantChange(base(), cur); got != tc.want {
			t.Errorf("%s: relevant=%v, want %v", name, got, tc.want)
		}
	}
}

// TestPlanStagingBudget: with maxStaging 2 the target goes to two nodes at
// a time; a node that staged, a silent agent's node and a degraded node
// free their share; a granted node gets its target whatever the budget.
func TestPlanStagingBudget(t *testing.T) {
	const target = "quay.io/os:2"
	two := func(s *v1alpha1.UpdatePoolSpec) { s.MaxStaging = ptrInt32(2) }
	nodes := healthy(6)
	for i := range nodes {
		nodes.annotate(i, v1alpha1.AnnotationTarget, "quay.io/os:1", v1alpha1.AnnotationStaged, "")
	}
	paused := func(s *v1alpha1.UpdatePoolSpec) { s.Paused = true }
	p, _ := plan(pool(intstr.FromInt32(1), two, paused), nodes.views(), nil, now)
	if fmt.Sprint(p.setTarget) != "[n00 n01]" {
		t.Fatalf("first wave: setTarget %v, want [n00 n01]", p.setTarget)
	}
	nodes.annotate(0, v1alpha1.AnnotationTarget, target) // both downloading
	nodes.annotate(1, v1alpha1.AnnotationTarget, target)
	p, _ = plan(pool(intstr.FromInt32(1), two, paused), nodes.views(), nil, now)
	if len(p.setTarget) != 0 {
		t.Fatalf("budget used up: setTarget %v, want none", p.setTarget)
	}
	nodes.annotate(0, v1alpha1.AnnotationStaged, target) // n00 done downloading
	// n01's agent went silent: it holds no share.
	p, _ = plan(pool(intstr.FromInt32(1), two, paused), nodes.views("n01"), nil, now)
	if fmt.Sprint(p.setTarget) != "[n02 n03]" {
		t.Fatalf("after n00 staged and n01 went silent: setTarget %v, want [n02 n03]", p.setTarget)
	}
	// Unpaused, maxUnavailable 3: only the node that staged is granted;
	// the budget is never exceeded by a grant.
	nodes.annotate(2, v1alpha1.AnnotationTarget, target)
	nodes.annotate(3, v1alpha1.AnnotationTarget, target)
	p, _ = plan(pool(intstr.FromInt32(3), two), nodes.views(), nil, now)
	if fmt.Sprint(p.grant) != "[n00]" || len(p.setTarget) != 0 {
		t.Fatalf("grant %v setTarget %v; want [n00] (the staged one) and no new target", p.grant, p.setTarget)
	}
	// No budget: every stale node at once.
	stale := healthy(3)
	for i := range stale {
		stale.annotate(i, v1alpha1.AnnotationTarget, "quay.io/os:1", v1alpha1.AnnotationStaged, "")
	}
	p, _ = plan(pool(intstr.FromInt32(1), paused), stale.views(), nil, now)
	if fmt.Sprint(p.setTarget) != "[n00 n01 n02]" {
		t.Fatalf("no budget: setTarget %v, want every node", p.setTarget)
	}
}

func ptrInt32(v int32) *int32 { return &v }

// finish makes node i report state for grant "g" on target.
func (f fleet) finish(i int, state v1alpha1.Step, target string) {
	f.annotate(i, v1alpha1.AnnotationGrant, "g", v1alpha1.AnnotationGrantTarget, target, v1alpha1.AnnotationStateGrant, "g",
		v1alpha1.AnnotationStateTarget, target, v1alpha1.AnnotationState, string(state))
}

func TestPlanCountsAFinishedNodeThatDoesNotServe(t *testing.T) {
	nodes := healthy(3)
	nodes.finish(0, v1alpha1.StepDone, "quay.io/os:2")
	nodes[0].Status.Conditions = append(nodes[0].Status.Conditions,
		corev1.NodeCondition{Type: corev1.NodeNetworkUnavailable, Status: corev1.ConditionTrue})
	p, _ := plan(pool(intstr.FromInt32(1)), nodes.views(), nil, now)
	if fmt.Sprint(p.release) != "[n00]" || len(p.grant) != 0 || p.unavailable["n00"] == "" {
		t.Fatalf("Done without network: release %v grant %v unavailable %v; want n00 released, counted, nothing granted",
			p.release, p.grant, p.unavailable)
	}
	nodes[0].Status.Conditions = nodes[0].Status.Conditions[:1]
	nodes[0].Spec.Unschedulable = true // Yielded because an admin cordoned it
	nodes.finish(0, v1alpha1.StepYielded, "quay.io/os:2")
	p, _ = plan(pool(intstr.FromInt32(1)), nodes.views(), nil, now)
	if fmt.Sprint(p.yielded) != "[n00]" || len(p.grant) != 0 {
		t.Fatalf("Yielded while cordoned: yielded %v grant %v; want n00 released, nothing granted", p.yielded, p.grant)
	}
	nodes[0].Spec.Unschedulable = false
	p, _ = plan(pool(intstr.FromInt32(1)), nodes.views(), nil, now)
	if fmt.Sprint(p.release) != "[n00]" || len(p.grant) != 0 || p.unavailable["n00"] != releasingWhy {
		t.Fatalf("Yielded and serving: release %v grant %v unavailable %v; want n00 released and counted until the release is seen",
			p.release, p.grant, p.unavailable)
	}
	nodes.annotate(0, v1alpha1.AnnotationGrant, "", v1alpha1.AnnotationYieldedAt, now.UTC().Format(time.RFC3339)) // the release is seen
	p, _ = plan(pool(intstr.FromInt32(1)), nodes.views(), nil, now)
	if fmt.Sprint(p.grant) != "[n01]" {
		t.Fatalf("Yielded, serving and released: grant %v, want [n01]", p.grant)
	}
}

func TestPlanCountsSharedNodesAndReleasesOnlyItsOwnGrants(t *testing.T) {
	nodes := healthy(3)
	nodes.annotate(0, v1alpha1.AnnotationGrant, "g", v1alpha1.AnnotationState, "Rebooting")
	views := nodes.views()
	views[0].shared, views[0].owner = true, "other"
	p, _ := plan(pool(intstr.FromInt32(1)), views, nil, now)
	if len(p.grant) != 0 || p.unavailable["n00"] == "" || fmt.Sprint(p.overlapping) != "[n00]" || p.machines != 2 {
		t.Fatalf("shared node in flight: grant %v unavailable %v overlapping %v machines %d", p.grant, p.unavailable, p.overlapping, p.machines)
	}
	nodes.finish(0, v1alpha1.StepDone, "quay.io/os:2")
	views = nodes.views()
	views[0].shared, views[0].owner = true, "other"
	p, _ = plan(pool(intstr.FromInt32(1)), views, nil, now)
	if len(p.release) != 0 || fmt.Sprint(p.grant) != "[n01]" {
		t.Fatalf("shared node Done, granted by another pool: release %v grant %v; want no release here, n01 granted", p.release, p.grant)
	}
	views[0].owner = "p"
	p, _ = plan(pool(intstr.FromInt32(1)), views, nil, now)
	if fmt.Sprint(p.release) != "[n00]" || slices.Contains(p.grant, "n00") || slices.Contains(p.setTarget, "n00") {
		t.Fatalf("shared node Done, granted here: release %v grant %v setTarget %v", p.release, p.grant, p.setTarget)
	}
}

func TestPlanKeepsTheTargetOfAGrant(t *testing.T) {
	nodes := healthy(2)
	for i := range nodes {
		nodes.annotate(i, v1alpha1.AnnotationTarget, "quay.io/os:1")
	}
	nodes.annotate(0, v1alpha1.AnnotationGrant, "g", v1alpha1.AnnotationState, "Draining")
	p, _ := plan(pool(intstr.FromInt32(1)), nodes.views(), map[string]bool{"n01": true}, now)
	if len(p.setTarget) != 0 {
		t.Fatalf("granted n00 and pending n01 keep their target: setTarget %v", p.setTarget)
	}
	for _, tc := range []struct {
		state   v1alpha1.Step
		release bool
	}{{v1alpha1.StepDone, true}, {v1alpha1.StepYielded, true}, {v1alpha1.StepDegraded, true}, {v1alpha1.StepDraining, false}} {
		nodes.finish(0, tc.state, "quay.io/os:1") // the grant's target, not the pool's
		p, _ = plan(pool(intstr.FromInt32(1)), nodes.views(), nil, now)
		if got := slices.Contains(p.release, "n00"); got != tc.release || slices.Contains(p.setTarget, "n00") {
			t.Errorf("%s for the old target: release=%v (want %v), setTarget %v", tc.state, got, tc.release, p.setTarget)
		}
	}
	nodes.finish(0, v1alpha1.StepDegraded, "quay.io/os:2") // Degraded on the pool's target: kept
	if p, _ = plan(pool(intstr.FromInt32(1)), nodes.views(), nil, now); len(p.release) != 0 {
		t.Errorf("Degraded on the pool's target: released %v", p.release)
	}
}

func TestPlanControlPlaneCapAndZeroPercent(t *testing.T) {
	nodes := healthy(3)
	views := nodes.views()
	views[0].controlPlane, views[1].controlPlane = true, true
	p, _ := planPool(planInput{pool: pool(intstr.FromInt32(3)), nodes: views, now: now})
	if fmt.Sprint(p.grant) != "[n00 n02]" {
		t.Fatalf("two control-plane candidates: grant %v, want one of them and the worker", p.grant)
	}
	p, _ = planPool(planInput{pool: pool(intstr.FromInt32(3)), nodes: views, now: now, controlPlaneBusy: "cp-9 is unavailable"})
	if fmt.Sprint(p.grant) != "[n02]" {
		t.Fatalf("another control-plane node unavailable: grant %v, want the worker only", p.grant)
	}
	p, _ = planPool(planInput{pool: pool(intstr.FromInt32(3)), nodes: views[:2], now: now, controlPlaneBusy: "cp-9 is unavailable"})
	if len(p.grant) != 0 || p.hold.message != "cp-9 is unavailable" {
		t.Fatalf("only control-plane candidates, one busy elsewhere: grant %v waiting %q", p.grant, p.hold.message)
	}
	p, _ = plan(pool(intstr.FromString("0%")), healthy(3).views(), nil, now)
	if len(p.grant) != 0 || !strings.Contains(p.hold.message, "resolves to 0") {
		t.Fatalf("0%%: grant %v waiting %q", p.grant, p.hold.message)
	}
}

// TestControlPlaneSlotKeptUntilReleased: a control-plane node that serves
// but soaks after Done keeps the cluster-wide slot; one that holds a
// finished grant no pool would release (no pool selects it) does not hold
// every other control-plane node forever.
func TestControlPlaneSlotKeptUntilReleased(t *testing.T) {
	soaking := &corev1.Node{ObjectMeta: metav1.ObjectMeta{Name: "cp-0", ResourceVersion: "1",
		Labels: map[string]string{"node-role.kubernetes.io/control-plane": "", "group": "a"},
		Annotations: map[string]string{v1alpha1.AnnotationGrant: "g1", v1alpha1.AnnotationState: string(v1alpha1.StepDone),
			v1alpha1.AnnotationStateGrant: "g1", v1alpha1.AnnotationStateTarget: "os:1", v1alpha1.AnnotationTarget: "os:1",
			v1alpha1.AnnotationSoakUntil: now.Add(time.Minute).Format(time.RFC3339)}},
		Status: corev1.NodeStatus{Conditions: []corev1.NodeCondition{{Type: corev1.NodeReady, Status: corev1.ConditionTrue}}}}
	mkPool := func(name, group string) *v1alpha1.UpdatePool {
		p := pool(intstr.FromInt32(1))
		p.Name, p.Spec.OSImage = name, "os:1"
		p.Spec.NodeSelector = &metav1.LabelSelector{MatchLabels: map[string]string{"group": group}}
		return p
	}
	alive := func(string) bool { return true }
	other := mkPool("b", "b")
	in, _, err := buildInput(other, []*v1alpha1.UpdatePool{mkPool("a", "a"), other}, []*corev1.Node{soaking}, nil, alive, nil, nil, now)
	if err != nil {
		t.Fatal(err)
	}
	if _, kept := in.controlPlaneSlots["cp-0"]; !kept {
		t.Errorf("a soaking control-plane node of another pool keeps no cluster-wide slot: %v", in.controlPlaneSlots)
	}
	in, _, err = buildInput(other, []*v1alpha1.UpdatePool{other}, []*corev1.Node{soaking}, nil, alive, nil, nil, now)
	if err != nil {
		t.Fatal(err)
	}
	if len(in.controlPlaneSlots) > 0 {
		t.Errorf("a finished grant no pool would release keeps the cluster-wide slot: %v", in.controlPlaneSlots)
	}
}
