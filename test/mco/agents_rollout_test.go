package mco_test

import (
	"context"
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	policyv1 "k8s.io/api/policy/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/intstr"
	"k8s.io/utils/ptr"

	"github.com/nodeward/nodeward/test/cluster"
	"github.com/nodeward/nodeward/test/mco"
)

const testKey = "ssh-ed25519 AAAAC3NzaC1lZDI1NTE5AAAAIIk9nSFhmbkJb4rHiO1dC3q6ePmZbM7ytMSKkOPoJ7aE nodeward-test"

// TestAgentsRollOutUnderTheRealController: three real agents on simulated
// hosts, driven by the real node and drain controllers, roll a new rendered
// config out — image, kernel arguments (one removed, a quoted one added), a
// file, a unit and core's SSH key — one node at a time, every drain through
// the drain controller, until the pool is Updated on it, under the Default
// and the TechPreviewNoUpgrade feature sets (where the pool's counts come
// from the MachineConfigNodes the agents keep). Under Default a pod whose
// PDB allows no disruption blocks one node's drain: the MachineConfigNode
// says why, the node turns Degraded and the pool shows its message; once
// the PDB goes the rollout finishes.
func TestAgentsRollOutUnderTheRealController(t *testing.T) {
	for _, tc := range []struct {
		set     mco.FeatureSet
		pool    string
		blocked bool
	}{{mco.Default, "rolldefault", true}, {mco.TechPreviewNoUpgrade, "rolltechpreview", false}} {
		t.Run(string(tc.set), func(t *testing.T) { rollOut(t, tc.set, tc.pool, tc.blocked) })
	}
}

func rollOut(t testing.TB, set mco.FeatureSet, pool string, blockOne bool) {
	first := demoConfig("quay.io/fedora/fedora-coreos:41", []string{"nodeward.old=1"}, "one", "")
	second := demoConfig("quay.io/fedora/fedora-coreos:42", []string{"nodeward.test=1", `q="a b"`}, "two", testKey)
	p := newAgentPool(t, pool, 3, first, second, "--mco-drain-degrade-after", "15s")
	ctx := context.Background()
	p.startAgents(t)
	p.start(t, set)
	// Under TechPreviewNoUpgrade the counts come from the agents'
	// MachineConfigNodes: without them the pool is never Updated.
	p.c.WaitPool(p.pool.Name, time.Minute, "Updated on "+p.config1, func(s mco.PoolStatus) bool {
		return s.IsTrue("Updated") && s.UpdatedMachineCount == 3 && s.Configuration == p.config1
	})
	blocked, guardNS := p.nodes[1], ""
	if blockOne {
		guardNS = guardPod(t, p, blocked)
	}
	began := time.Now()
	if err := p.c.SetPoolConfig(ctx, p.pool.Name, p.config2); err != nil {
		t.Fatal(err)
	}
	if blockOne {
		p.c.WaitPool(p.pool.Name, 3*time.Minute, "NodeDegraded naming the blocked drain of "+blocked, func(s mco.PoolStatus) bool {
			c := s.Conditions["NodeDegraded"]
			return c.Status == "True" && strings.Contains(c.Message, blocked) && strings.Contains(c.Message, "failed to drain node")
		})
		// The drain controller's own word on the drain (its attempt lasts
		// 90 s before it writes the eviction's error there).
		if c := p.mcnCondition(t, blocked, "Drained"); c.Status != "Unknown" || !strings.Contains(c.Message, "drain-"+p.config2) {
			t.Errorf("MachineConfigNode %s Drained = %+v, want Unknown naming the drain request", blocked, c)
		}
		if c := p.mcnCondition(t, blocked, "NodeDegraded"); c.Status != "True" || !strings.Contains(c.Message, "failed to drain node") {
			t.Errorf("MachineConfigNode %s NodeDegraded = %+v", blocked, c)
		}
		t.Logf("drain of %s blocked and shown %s after the rollout began", blocked, time.Since(began).Round(time.Second))
		if err := p.c.Kube.PolicyV1().PodDisruptionBudgets(guardNS).Delete(ctx, "guarded", metav1.DeleteOptions{}); err != nil {
			t.Fatal(err)
		}
	}
	p.c.WaitPool(p.pool.Name, 5*time.Minute, "Updated on "+p.config2, func(s mco.PoolStatus) bool {
		return s.IsTrue("Updated") && s.UpdatedMachineCount == 3 && s.DegradedMachineCount == 0 && s.Configuration == p.config2
	})
	t.Logf("%s: 3 nodes rolled out in %s", set, time.Since(began).Round(time.Second))
	for _, node := range p.nodes {
		p.assertOnSecond(t, node, []string{"nodeward.test=1", `q="a b"`}, []string{"nodeward.old=1"}, "two", testKey)
		n := p.node(t, node)
		a := n.Annotations
		if a[mco.AnnotationState] != mco.StateDone || a[mco.AnnotationCurrentConfig] != p.config2 ||
			a["machineconfiguration.openshift.io/lastAppliedDrain"] != "uncordon-"+p.config2 || n.Spec.Unschedulable {
			t.Errorf("%s: state %s, currentConfig %s, lastAppliedDrain %s, unschedulable %v", node, a[mco.AnnotationState],
				a[mco.AnnotationCurrentConfig], a["machineconfiguration.openshift.io/lastAppliedDrain"], n.Spec.Unschedulable)
		}
		if c := p.mcnCondition(t, node, "Updated"); c.Status != "True" {
			t.Errorf("MachineConfigNode %s Updated = %+v", node, c)
		}
	}
	if max := p.watch.Max(); max != 1 {
		t.Errorf("at most %d nodes were unavailable at once; want exactly 1 (maxUnavailable 1)", max)
	}
}

// guardPod puts on node a pod whose PDB allows no disruption, in the
// namespace it returns.
func guardPod(t testing.TB, p *agentPool, node string) string {
	t.Helper()
	ctx := context.Background()
	ns := p.cp.Namespace(t)
	labels := map[string]string{"app": "guarded"}
	pod := &corev1.Pod{ObjectMeta: metav1.ObjectMeta{Name: "guarded", Namespace: ns, Labels: labels},
		Spec: corev1.PodSpec{NodeName: node, TerminationGracePeriodSeconds: ptr.To[int64](1),
			Containers: []corev1.Container{{Name: "app", Image: "registry.invalid/app:1"}}}}
	if _, err := p.c.Kube.CoreV1().Pods(ns).Create(ctx, pod, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	minAvailable := intstr.FromInt32(1)
	pdb := &policyv1.PodDisruptionBudget{ObjectMeta: metav1.ObjectMeta{Name: "guarded", Namespace: ns},
		Spec: policyv1.PodDisruptionBudgetSpec{MinAvailable: &minAvailable, Selector: &metav1.LabelSelector{MatchLabels: labels}}}
	if _, err := p.c.Kube.PolicyV1().PodDisruptionBudgets(ns).Create(ctx, pdb, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	cluster.WaitFor(t, time.Minute, "the guarded pod running under its PDB", func(ctx context.Context) (bool, error) {
		got, err := p.c.Kube.CoreV1().Pods(ns).Get(ctx, "guarded", metav1.GetOptions{})
		if err != nil || got.Status.Phase != corev1.PodRunning {
			return false, err
		}
		b, err := p.c.Kube.PolicyV1().PodDisruptionBudgets(ns).Get(ctx, "guarded", metav1.GetOptions{})
		return err == nil && b.Status.ObservedGeneration == b.Generation && b.Status.CurrentHealthy == 1, err
	})
	return ns
}

// TestAgentsRollOutWithNodewardsOwnDrain: with --mco-drain=nodeward the
// agents cordon and drain with nodeward's own drain (the drain controller
// is never asked) and the real node controller still rolls the pool out
// one node at a time.
func TestAgentsRollOutWithNodewardsOwnDrain(t *testing.T) {
	first := demoConfig("quay.io/fedora/fedora-coreos:41", nil, "one", "")
	second := demoConfig("quay.io/fedora/fedora-coreos:42", []string{"nodeward.test=1"}, "two", "")
	p := newAgentPool(t, "owndrain", 2, first, second, "--mco-drain", "nodeward")
	ctx := context.Background()
	p.startAgents(t)
	p.start(t, mco.Default)
	p.c.WaitPool(p.pool.Name, time.Minute, "Updated on "+p.config1, func(s mco.PoolStatus) bool {
		return s.IsTrue("Updated") && s.UpdatedMachineCount == 2
	})
	if err := p.c.SetPoolConfig(ctx, p.pool.Name, p.config2); err != nil {
		t.Fatal(err)
	}
	p.c.WaitPool(p.pool.Name, 3*time.Minute, "Updated on "+p.config2, func(s mco.PoolStatus) bool {
		return s.IsTrue("Updated") && s.UpdatedMachineCount == 2 && s.Configuration == p.config2
	})
	for _, node := range p.nodes {
		p.assertOnSecond(t, node, []string{"nodeward.test=1"}, nil, "two", "")
		n := p.node(t, node)
		if d := n.Annotations["machineconfiguration.openshift.io/desiredDrain"]; d != "" || n.Spec.Unschedulable {
			t.Errorf("%s: desiredDrain %q (the drain controller was asked), unschedulable %v", node, d, n.Spec.Unschedulable)
		}
	}
	if max := p.watch.Max(); max != 1 {
		t.Errorf("at most %d nodes were unavailable at once; want exactly 1", max)
	}
}
