package e2e

import (
	"context"
	"encoding/json"
	"fmt"
	"slices"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	policyv1 "k8s.io/api/policy/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/apimachinery/pkg/util/intstr"
	"k8s.io/utils/ptr"

	v1alpha1 "github.com/nodeward/nodeward/api/v1alpha1"
	"github.com/nodeward/nodeward/daemon/update"
	"github.com/nodeward/nodeward/test/cluster"
	"github.com/nodeward/nodeward/test/sim"
)

// TestRolloutTenNodes: ten nodes with real pods under a PDB, maxUnavailable
// 3. Every node ends Done on the target after one reboot, and no event ever
// shows more than three nodes unavailable.
func TestRolloutTenNodes(t *testing.T) {
	t.Parallel()
	p := newPool(t, "roll", poolOptions{count: 10, maxUnavailable: 3, spec: cluster.NodeSpec{Zones: []string{"a", "b"}}})
	ns := p.cp.Namespace(t)
	p.workload(ns, "web", 10)
	pdb := &policyv1.PodDisruptionBudget{
		ObjectMeta: metav1.ObjectMeta{Name: "web", Namespace: ns},
		Spec: policyv1.PodDisruptionBudgetSpec{
			MaxUnavailable: ptr.To(intstr.FromInt32(2)),
			Selector:       &metav1.LabelSelector{MatchLabels: map[string]string{"app": "web"}},
		},
	}
	if _, err := p.cp.Client().PolicyV1().PodDisruptionBudgets(ns).Create(context.Background(), pdb, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	p.startAgents()
	p.grant(toOS, 3, 0)
	p.waitAllDone(3 * time.Minute)
	for _, name := range p.names {
		p.assertUpdated(name)
		if steps := p.steps(name); !slices.Contains(steps, v1alpha1.StepStaged) || !slices.Contains(steps, v1alpha1.StepDraining) {
			t.Errorf("%s: steps %v miss Staged or Draining", name, steps)
		}
	}
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.maxSeen < 2 {
		t.Errorf("at most %d node unavailable at once: the rollout did not run in parallel", p.maxSeen)
	}
	t.Logf("maximum unavailable observed: %d", p.maxSeen)
}

// TestKillAndResume kills the agent at the riskiest points of the cycle and
// restarts it from its state file: every node still ends updated after
// exactly one reboot, uncordoned.
func TestKillAndResume(t *testing.T) {
	t.Parallel()
	cases := []struct {
		name string
		// hold keeps the node at the kill point; release lets it go on.
		setup func(p *pool, name, ns string) (release func())
		at    v1alpha1.Step
		// reason, when set, is waited for in the node's reported reason
		// before the kill.
		reason string
		// beforeKill, when set, waits for what must have happened before
		// the kill.
		beforeKill func(t *testing.T, p *pool, name string)
		check      func(t *testing.T, p *pool, name string)
	}{
		{name: "after-cordon", at: v1alpha1.StepDraining,
			setup: func(p *pool, name, ns string) func() { return blockDrain(p, name, ns) },
			check: mustBeCordoned},
		{name: "mid-drain", at: v1alpha1.StepDraining, reason: "drain blocked",
			setup: func(p *pool, name, ns string) func() { return blockDrain(p, name, ns) },
			check: mustBeCordoned},
		{name: "after-finalize-before-reboot", at: v1alpha1.StepRebooting,
			setup: func(p *pool, name, ns string) func() {
				p.nodes[name].Host.IgnoreReboots = 1 // the request dies with the agent
				return func() {}
			},
			// The kill comes after the request, which the step's report
			// precedes: killed before it, the agent would make its first
			// request after the restart, and that one would be dropped.
			beforeKill: func(t *testing.T, p *pool, name string) {
				cluster.WaitFor(t, time.Minute, name+"'s reboot request", func(context.Context) (bool, error) {
					return p.nodes[name].Host.RebootsToIgnore() == 0, nil
				})
			},
			check: func(t *testing.T, p *pool, name string) {
				mustBeCordoned(t, p, name)
				if r := p.nodes[name].Host.Reboots(); r != 0 {
					t.Fatalf("%s rebooted %d times before the kill", name, r)
				}
			}},
		{name: "after-boot-before-uncordon", at: v1alpha1.StepWaitingHealthy,
			setup: func(p *pool, name, ns string) func() {
				var healthy atomic.Bool
				p.nodes[name].Check = func(ctx context.Context, n *corev1.Node) (bool, string, error) {
					if !healthy.Load() {
						return false, "post-update check not passed yet", nil
					}
					return update.Serving(ctx, n)
				}
				return func() { healthy.Store(true) }
			},
			check: func(t *testing.T, p *pool, name string) {
				mustBeCordoned(t, p, name)
				if r := p.nodes[name].Host.Reboots(); r != 1 {
					t.Fatalf("%s: %d reboots at the kill, want 1", name, r)
				}
			}},
	}
	for i, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			t.Parallel()
			p := newPool(t, fmt.Sprintf("kill%d", i), poolOptions{count: 1, maxUnavailable: 1})
			name := p.names[0]
			ns := p.cp.Namespace(t)
			release := c.setup(p, name, ns)
			p.startAgents()
			p.grant(toOS, 1, 0)
			p.waitStep(name, c.at, time.Minute)
			if c.reason != "" {
				p.waitReason(name, c.reason)
			}
			if c.beforeKill != nil {
				c.beforeKill(t, p, name)
			}
			p.nodes[name].Kill()
			c.check(t, p, name)
			if err := p.nodes[name].Start(); err != nil {
				t.Fatal(err)
			}
			release()
			p.waitStep(name, v1alpha1.StepDone, time.Minute)
			p.assertUpdated(name)
		})
	}
}

// blockDrain puts a pod on node behind a PDB that allows no disruption;
// release deletes the PDB.
func blockDrain(p *pool, node, ns string) func() {
	p.t.Helper()
	pinTo(p.t, p, ns, node)
	return func() {
		err := p.cp.Client().PolicyV1().PodDisruptionBudgets(ns).Delete(context.Background(), "pinned", metav1.DeleteOptions{})
		if err != nil {
			p.t.Errorf("delete PDB: %v", err)
		}
	}
}

func mustBeCordoned(t *testing.T, p *pool, name string) {
	t.Helper()
	n, err := p.node(context.Background(), name)
	if err != nil {
		t.Fatal(err)
	}
	if _, record := n.Annotations[v1alpha1.AnnotationCordonedBy]; !n.Spec.Unschedulable || !record {
		t.Fatalf("%s at the kill: unschedulable %v, cordon record %v; want both", name, n.Spec.Unschedulable, record)
	}
}

// TestAdminCordonedNodeIsSkipped: a node an admin cordoned is never
// drained, rebooted or uncordoned; the rest of the pool updates.
func TestAdminCordonedNodeIsSkipped(t *testing.T) {
	t.Parallel()
	p := newPool(t, "admin", poolOptions{count: 2})
	admin := p.names[0]
	patchNode(t, p, admin, map[string]any{"spec": map[string]any{"unschedulable": true}})
	p.startAgents()
	p.grant(toOS, 1, 0)
	p.waitStep(p.names[1], v1alpha1.StepDone, 2*time.Minute)
	p.assertUpdated(p.names[1])
	n, err := p.node(context.Background(), admin)
	if err != nil {
		t.Fatal(err)
	}
	if !n.Spec.Unschedulable || p.nodes[admin].Host.Reboots() != 0 || !slices.Contains(p.steps(admin), v1alpha1.StepYielded) {
		t.Fatalf("admin-cordoned node: unschedulable %v reboots %d steps %v; want cordoned, not rebooted, Yielded",
			n.Spec.Unschedulable, p.nodes[admin].Host.Reboots(), p.steps(admin))
	}
}

// TestPDBBlockedNodeYields: a node whose drain a PDB blocks gives its slot
// back after the pool's drain timeout, uncordoned, and the other nodes
// finish.
func TestPDBBlockedNodeYields(t *testing.T) {
	t.Parallel()
	p := newPool(t, "yield", poolOptions{count: 3, maxUnavailable: 1})
	ns := p.cp.Namespace(t)
	blocked := p.names[0]
	pinTo(t, p, ns, blocked)
	p.startAgents()
	p.grant(toOS, 1, 2*time.Second)
	for _, name := range p.names[1:] {
		p.waitStep(name, v1alpha1.StepDone, 2*time.Minute)
		p.assertUpdated(name)
	}
	if !slices.Contains(p.steps(blocked), v1alpha1.StepYielded) || p.nodes[blocked].Host.Reboots() != 0 {
		t.Fatalf("blocked node: steps %v reboots %d; want Yielded and no reboot", p.steps(blocked), p.nodes[blocked].Host.Reboots())
	}
}

// pinTo runs one pod on node under a PDB that forbids its eviction.
func pinTo(t *testing.T, p *pool, ns, node string) {
	t.Helper()
	p.workloadOn(ns, "pinned", 1, map[string]string{"kubernetes.io/hostname": node})
	pdb := &policyv1.PodDisruptionBudget{
		ObjectMeta: metav1.ObjectMeta{Name: "pinned", Namespace: ns},
		Spec: policyv1.PodDisruptionBudgetSpec{
			MinAvailable: ptr.To(intstr.FromInt32(1)),
			Selector:     &metav1.LabelSelector{MatchLabels: map[string]string{"app": "pinned"}},
		},
	}
	if _, err := p.cp.Client().PolicyV1().PodDisruptionBudgets(ns).Create(context.Background(), pdb, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	cluster.WaitFor(t, 30*time.Second, "PDB observed", func(ctx context.Context) (bool, error) {
		got, err := p.cp.Client().PolicyV1().PodDisruptionBudgets(ns).Get(ctx, "pinned", metav1.GetOptions{})
		return err == nil && got.Status.ObservedGeneration == got.Generation && got.Status.CurrentHealthy == 1, err
	})
}

// TestFailedVerificationDegrades: the new deployment never boots (the old
// one comes back); the agent stages and reboots again twice, then stays
// Degraded and cordoned, holding its slot.
func TestFailedVerificationDegrades(t *testing.T) {
	t.Parallel()
	p := newPool(t, "bad", poolOptions{count: 2, maxUnavailable: 1,
		tune: func(n *sim.SimNode) { n.Host.BadTarget = toOS }})
	p.startAgents()
	p.grant(toOS, 1, 0)
	cluster.WaitFor(t, 2*time.Minute, "one node Degraded", func(ctx context.Context) (bool, error) {
		for _, name := range p.names {
			n, err := p.node(ctx, name)
			if err != nil {
				return false, err
			}
			if n.Annotations[v1alpha1.AnnotationState] == string(v1alpha1.StepDegraded) {
				return true, nil
			}
		}
		return false, nil
	})
	var degraded, other string
	for _, name := range p.names {
		n, _ := p.node(context.Background(), name)
		if n.Annotations[v1alpha1.AnnotationState] == string(v1alpha1.StepDegraded) {
			degraded = name
			if !n.Spec.Unschedulable || n.Annotations[v1alpha1.AnnotationReason] == "" {
				t.Errorf("degraded %s: unschedulable %v reason %q", name, n.Spec.Unschedulable, n.Annotations[v1alpha1.AnnotationReason])
			}
		} else {
			other = name
		}
	}
	booted, _ := p.nodes[degraded].Host.Booted(context.Background())
	// The target never boots (the old OS comes back each time): that is
	// retried after staging again, twice, then Degraded without a rollback.
	if booted != fromOS || p.nodes[degraded].Host.Reboots() != 3 {
		t.Errorf("degraded node booted %s after %d reboots; want %s after 3 (two retries)", booted, p.nodes[degraded].Host.Reboots(), fromOS)
	}
	if n, _ := p.node(context.Background(), degraded); !strings.Contains(n.Annotations[v1alpha1.AnnotationReason], "previous OS") {
		t.Errorf("degraded node's reason %q does not say the previous OS came back", n.Annotations[v1alpha1.AnnotationReason])
	}
	// The degraded node keeps the only slot: the other one must not start.
	n, _ := p.node(context.Background(), other)
	if n.Spec.Unschedulable || p.nodes[other].Host.Reboots() != 0 {
		t.Errorf("%s disrupted while the pool's only slot is held by a degraded node", other)
	}
}

// TestHooksHoldTheirSteps: a pre-drain hook keeps the node schedulable and
// a pre-reboot hook keeps the OS unfinalized until their owners remove them.
func TestHooksHoldTheirSteps(t *testing.T) {
	t.Parallel()
	preDrain, preReboot := v1alpha1.PreDrainHookPrefix+"quorum", v1alpha1.PreRebootHookPrefix+"flush-logs"
	p := newPool(t, "hooks", poolOptions{count: 1, spec: cluster.NodeSpec{
		Annotations: map[string]string{preDrain: "etcd-guard", preReboot: "log-shipper"}}})
	name := p.names[0]
	p.startAgents()
	p.grant(toOS, 1, 0)
	p.waitReason(name, "pre-drain hooks: quorum (owner etcd-guard)")
	if n, _ := p.node(context.Background(), name); n.Spec.Unschedulable || n.Annotations[v1alpha1.AnnotationState] != string(v1alpha1.StepHooksPreDrain) {
		t.Fatalf("pre-drain hook did not hold: unschedulable %v step %s", n.Spec.Unschedulable, n.Annotations[v1alpha1.AnnotationState])
	}
	patchNode(t, p, name, map[string]any{"metadata": map[string]any{"annotations": map[string]any{preDrain: nil}}})
	p.waitReason(name, "pre-reboot hooks: flush-logs (owner log-shipper)")
	if p.nodes[name].Host.Reboots() != 0 || p.nodes[name].Host.RebootPending() {
		t.Fatalf("pre-reboot hook did not hold the reboot")
	}
	patchNode(t, p, name, map[string]any{"metadata": map[string]any{"annotations": map[string]any{preReboot: nil}}})
	p.waitStep(name, v1alpha1.StepDone, time.Minute)
	p.assertUpdated(name)
	// The steps left Events on the Node.
	cluster.WaitFor(t, 30*time.Second, "update Events on "+name, func(ctx context.Context) (bool, error) {
		events, err := p.cp.Client().CoreV1().Events(metav1.NamespaceDefault).List(ctx, metav1.ListOptions{
			FieldSelector: "involvedObject.kind=Node,involvedObject.name=" + name})
		if err != nil {
			return false, err
		}
		reasons := map[string]bool{}
		for _, e := range events.Items {
			reasons[e.Reason] = true
		}
		// Not Rebooting: the simulated reboot stops the agent right after
		// it, and a machine going down may lose its last Event.
		for _, s := range []v1alpha1.Step{v1alpha1.StepHooksPreDrain, v1alpha1.StepDraining, v1alpha1.StepVerifying, v1alpha1.StepDone} {
			if !reasons["Update"+string(s)] {
				return false, nil
			}
		}
		return true, nil
	})
}

func patchNode(t *testing.T, p *pool, name string, patch map[string]any) {
	t.Helper()
	data, _ := json.Marshal(patch)
	if _, err := p.cp.Client().CoreV1().Nodes().Patch(context.Background(), name, types.MergePatchType, data, metav1.PatchOptions{}); err != nil {
		t.Fatalf("patch node %s: %v", name, err)
	}
}
