package mco_test

import (
	"context"
	"os"
	"slices"
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/nodeward/nodeward/test/mco"
	"github.com/nodeward/nodeward/test/rpmostree"
	"github.com/nodeward/nodeward/test/sim"
)

// TestAgentRollsBackAFailedBootAndThePoolHalts: the first node's first boot
// into the new config comes up without one of its kernel arguments (the
// bootloader lost it). The agent's verification fails; it puts the
// previous files back, rolls the deployment back and reboots into the
// previous config, and reports Degraded with the reason, which the pool
// shows. The controller then grants no other node.
func TestAgentRollsBackAFailedBootAndThePoolHalts(t *testing.T) {
	first := demoConfig("quay.io/fedora/fedora-coreos:41", []string{"nodeward.old=1"}, "one", "")
	second := demoConfig("quay.io/fedora/fedora-coreos:42", []string{"nodeward.test=1"}, "two", "")
	p := newAgentPool(t, "rollback", 3, first, second)
	failing := p.nodes[0] // zone-a: the controller's first pick
	// The host was provisioned with the first config (newAgentPool wrote
	// its file and unit as Ignition does): the rollback must bring them
	// back.
	p.procs[failing].OnBoot = func(boot int, d *rpmostree.Double) error {
		if boot != 1 {
			return nil
		}
		data, err := os.ReadFile(d.CmdlinePath())
		if err != nil {
			return err
		}
		return os.WriteFile(d.CmdlinePath(), []byte(strings.Replace(string(data), " nodeward.test=1", "", 1)), 0o644)
	}
	p.startAgents(t)
	states := recordStates(t, p, failing)
	p.start(t, mco.Default)
	p.c.WaitPool(p.pool.Name, time.Minute, "Updated on "+p.config1, func(s mco.PoolStatus) bool {
		return s.IsTrue("Updated") && s.UpdatedMachineCount == 3
	})
	if err := p.c.SetPoolConfig(context.Background(), p.pool.Name, p.config2); err != nil {
		t.Fatal(err)
	}
	status := p.c.WaitPool(p.pool.Name, 2*time.Minute, "NodeDegraded naming the rollback on "+failing, func(s mco.PoolStatus) bool {
		c := s.Conditions["NodeDegraded"]
		return c.Status == "True" && strings.Contains(c.Message, failing) && strings.Contains(c.Message, "rolled back")
	})
	t.Logf("pool NodeDegraded: %s", status.Conditions["NodeDegraded"].Message)
	n := p.node(t, failing)
	if a := n.Annotations; a[mco.AnnotationState] != mco.StateDegraded || a[mco.AnnotationCurrentConfig] != p.config1 ||
		!strings.Contains(a[mco.AnnotationReason], "nodeward.test=1") {
		t.Errorf("%s: state %s, currentConfig %s, reason %q; want Degraded on %s naming the missing argument", failing,
			a[mco.AnnotationState], a[mco.AnnotationCurrentConfig], a[mco.AnnotationReason], p.config1)
	}
	d, boots := p.booted(t, failing)
	if d.Checksum != sim.ProcBooted().Checksum || boots != 2 {
		t.Errorf("%s: booted %s after %d boots, want the previous deployment after the update's and the rollback's", failing, d.Checksum, boots)
	}
	if got := p.hostFile(t, failing, demoFile); got != "one" {
		t.Errorf("%s: %s = %q after the rollback, want the previous %q", failing, demoFile, got, "one")
	}
	if unit := p.hostFile(t, failing, "/etc/systemd/system/"+demoUnit); !strings.Contains(unit, "echo one") {
		t.Errorf("%s: unit after the rollback = %q, want the previous one", failing, unit)
	}
	// The MCD's sequence: Working from the grant, then Degraded and only
	// Degraded through the rollback's reboot (never Working again).
	if got := states(); !slices.Equal(got, []string{mco.StateDone, mco.StateWorking, mco.StateDegraded}) {
		t.Errorf("%s reported states %v; want Done, Working, Degraded", failing, got)
	}
	// Halted: for three update delays of the controller, no other node is
	// told to update.
	holds(t, 15*time.Second, "no other node told to update", func() bool {
		others := 0
		for _, name := range p.targeted(t, p.config2) {
			if name != failing {
				others++
			}
		}
		return others == 0
	})
}

// TestAgentRefusesAnUnsupportedChange: a new config that changes the
// kernel type is Unreconcilable: the agent names the field, the pool shows
// it, and nothing is staged, written or rebooted.
func TestAgentRefusesAnUnsupportedChange(t *testing.T) {
	first := demoConfig("quay.io/fedora/fedora-coreos:41", nil, "one", "")
	second := demoConfig("quay.io/fedora/fedora-coreos:42", nil, "two", "")
	second.Spec = map[string]any{"kernelType": "realtime"}
	p := newAgentPool(t, "refused", 1, first, second)
	node := p.nodes[0]
	p.startAgents(t)
	p.start(t, mco.Default)
	if err := p.c.SetPoolConfig(context.Background(), p.pool.Name, p.config2); err != nil {
		t.Fatal(err)
	}
	p.c.WaitPool(p.pool.Name, 2*time.Minute, "NodeDegraded naming kernelType", func(s mco.PoolStatus) bool {
		c := s.Conditions["NodeDegraded"]
		return c.Status == "True" && strings.Contains(c.Message, node) && strings.Contains(c.Message, "kernelType")
	})
	n := p.node(t, node)
	if a := n.Annotations; a[mco.AnnotationState] != mco.StateUnreconcilable || !strings.Contains(a[mco.AnnotationReason], "kernelType") {
		t.Errorf("%s: state %s, reason %q; want Unreconcilable naming kernelType", node, a[mco.AnnotationState], a[mco.AnnotationReason])
	}
	p.assertUntouched(t, node)
}

// TestAgentRefusesBesideAMachineConfigDaemon: with a machine-config-daemon
// pod on its node, the agent does not act on a new desiredConfig: it
// reports Degraded naming the pod and touches nothing.
func TestAgentRefusesBesideAMachineConfigDaemon(t *testing.T) {
	first := demoConfig("quay.io/fedora/fedora-coreos:41", nil, "one", "")
	second := demoConfig("quay.io/fedora/fedora-coreos:42", nil, "two", "")
	p := newAgentPool(t, "coexist", 1, first, second)
	node := p.nodes[0]
	ctx := context.Background()
	mcd := &corev1.Pod{ObjectMeta: metav1.ObjectMeta{Name: "machine-config-daemon-" + node, Namespace: "openshift-machine-config-operator",
		Labels: map[string]string{"k8s-app": "machine-config-daemon"}},
		Spec: corev1.PodSpec{NodeName: node, Containers: []corev1.Container{{Name: "machine-config-daemon", Image: "registry.invalid/mcd:1"}}}}
	if _, err := p.c.Kube.CoreV1().Pods(mcd.Namespace).Create(ctx, mcd, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		_ = p.c.Kube.CoreV1().Pods(mcd.Namespace).Delete(context.Background(), mcd.Name, metav1.DeleteOptions{GracePeriodSeconds: new(int64)})
	})
	p.startAgents(t)
	p.start(t, mco.Default)
	if err := p.c.SetPoolConfig(ctx, p.pool.Name, p.config2); err != nil {
		t.Fatal(err)
	}
	p.c.WaitNode(node, time.Minute, "Degraded naming the machine-config-daemon pod", func(n *corev1.Node) bool {
		return n.Annotations[mco.AnnotationState] == mco.StateDegraded &&
			strings.Contains(n.Annotations[mco.AnnotationReason], "machine-config-daemon pod openshift-machine-config-operator/"+mcd.Name)
	})
	p.assertUntouched(t, node)
}

// assertUntouched: nothing staged, no boot, the first config's file as
// provisioned.
func (p *agentPool) assertUntouched(t testing.TB, node string) {
	t.Helper()
	s, err := rpmostree.Load(p.procs[node].Double.Dir)
	if err != nil {
		t.Fatal(err)
	}
	if s.Staged != nil || s.Boots != 0 || p.hostFile(t, node, demoFile) != "one" {
		t.Errorf("%s: staged %v, %d boots, %s = %q; want nothing done (one, as provisioned)", node, s.Staged, s.Boots, demoFile, p.hostFile(t, node, demoFile))
	}
	if n := p.node(t, node); n.Spec.Unschedulable || n.Annotations[mco.AnnotationCurrentConfig] != p.config1 {
		t.Errorf("%s: unschedulable %v, currentConfig %s", node, n.Spec.Unschedulable, n.Annotations[mco.AnnotationCurrentConfig])
	}
}

// holds checks cond every 200 ms for d and fails the test the first time
// it is false.
func holds(t testing.TB, d time.Duration, what string, cond func() bool) {
	t.Helper()
	tick := time.NewTicker(200 * time.Millisecond)
	defer tick.Stop()
	for end := time.Now().Add(d); time.Now().Before(end); <-tick.C {
		if !cond() {
			t.Fatalf("%s: broken", what)
		}
	}
}

// TestSingleNodeUpdatesWithoutADrain: with the SingleReplica topology the
// controller copies onto the node, the agent updates it without a cordon
// and without asking the drain controller to drain; its pod stays.
func TestSingleNodeUpdatesWithoutADrain(t *testing.T) {
	first := demoConfig("quay.io/fedora/fedora-coreos:41", nil, "one", "")
	second := demoConfig("quay.io/fedora/fedora-coreos:42", nil, "two", "")
	p := newAgentPool(t, "single", 1, first, second)
	node := p.nodes[0]
	ctx := context.Background()
	if err := p.c.SetTopology(ctx, mco.SingleReplica); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		if err := p.c.SetTopology(context.Background(), mco.HighlyAvailable); err != nil {
			t.Errorf("restore the topology: %v", err)
		}
	})
	p.startAgents(t)
	p.start(t, mco.Default)
	p.c.WaitNode(node, time.Minute, "SingleReplica topology on the node", func(n *corev1.Node) bool {
		return n.Annotations[mco.AnnotationTopology] == mco.SingleReplica
	})
	// Every version of the node, from a watch: a cordon, however brief,
	// is seen.
	w, err := p.c.Kube.CoreV1().Nodes().Watch(ctx, metav1.ListOptions{FieldSelector: "metadata.name=" + node})
	if err != nil {
		t.Fatal(err)
	}
	defer w.Stop()
	cordoned := make(chan bool, 1)
	go func() {
		seen := false
		defer func() { cordoned <- seen }()
		for ev := range w.ResultChan() {
			if n, ok := ev.Object.(*corev1.Node); ok {
				seen = seen || n.Spec.Unschedulable
				if n.Annotations[mco.AnnotationCurrentConfig] == p.config2 {
					return
				}
			}
		}
	}()
	if err := p.c.SetPoolConfig(ctx, p.pool.Name, p.config2); err != nil {
		t.Fatal(err)
	}
	p.c.WaitPool(p.pool.Name, 2*time.Minute, "Updated on "+p.config2, func(s mco.PoolStatus) bool {
		return s.IsTrue("Updated") && s.UpdatedMachineCount == 1 && s.Configuration == p.config2
	})
	n := p.node(t, node)
	if <-cordoned || strings.HasPrefix(n.Annotations["machineconfiguration.openshift.io/desiredDrain"], "drain-") {
		t.Errorf("%s was cordoned or asked to be drained (desiredDrain %q) on a single-node cluster", node,
			n.Annotations["machineconfiguration.openshift.io/desiredDrain"])
	}
	p.assertOnSecond(t, node, nil, nil, "two", "")
}
