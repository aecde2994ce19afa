package mco_test

import (
	"context"
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"

	"github.com/nodeward/nodeward/test/mco"
)

// policyPool is a pool of count nodes moving from the base files to a
// policy.json change, which the default policies apply with a reload of
// CRI-O and no drain.
func policyPool(t *testing.T, name string, count int, args ...string) *agentPool {
	t.Helper()
	base := map[string]string{pullSecretFile: `{"auths":{}}`, policyFile: `{"default":[{"type":"insecureAcceptAnything"}]}`}
	next := map[string]string{pullSecretFile: `{"auths":{}}`, policyFile: `{"default":[{"type":"reject"}]}`}
	return newAgentPool(t, name, count, hostConfig(base, testKey), hostConfig(next, testKey), args...)
}

// TestFailedActionDegradesWithoutAReboot: the first node's CRI-O refuses
// its reload. The node reports Degraded with the daemon's message, is not
// rebooted, not cordoned, and the controller grants no other node; once
// the reload works again the agent's retry finishes the update and the
// rollout goes on.
func TestFailedActionDegradesWithoutAReboot(t *testing.T) {
	p := policyPool(t, "ndpfail", 2, "--mco-degrade-after", "3s")
	failing := p.nodes[0] // zone-a: the controller's first pick
	p.procs[failing].Systemd.SetJobResult("crio.service", "failed")
	p.startAgents(t)
	seen := watchDisruptions(t, p)
	p.start(t, mco.Default)
	p.c.WaitPool(p.pool.Name, time.Minute, "Updated on "+p.config1, func(s mco.PoolStatus) bool {
		return s.IsTrue("Updated") && s.UpdatedMachineCount == 2
	})
	ctx := context.Background()
	if err := p.c.SetPoolConfig(ctx, p.pool.Name, p.config2); err != nil {
		t.Fatal(err)
	}
	const msg = "could not apply update: reloading crio.service configuration failed. Error:"
	p.c.WaitNode(failing, 2*time.Minute, "Degraded with the daemon's message", func(n *corev1.Node) bool {
		return n.Annotations[mco.AnnotationState] == mco.StateDegraded && strings.Contains(n.Annotations[mco.AnnotationReason], msg)
	})
	p.c.WaitPool(p.pool.Name, time.Minute, "NodeDegraded naming "+failing, func(s mco.PoolStatus) bool {
		c := s.Conditions["NodeDegraded"]
		return c.Status == "True" && strings.Contains(c.Message, failing)
	})
	if c := p.mcnCondition(t, failing, "NodeDegraded"); c.Status != "True" || !strings.Contains(c.Message, msg) {
		t.Errorf("MachineConfigNode %s NodeDegraded = %+v; want the daemon's message", failing, c)
	}
	holds(t, 5*time.Second, "no reboot, no cordon and no other node granted while degraded", func() bool {
		_, boots := p.booted(t, failing)
		cordoned, _ := seen.of(failing)
		return boots == 0 && !cordoned && len(p.targeted(t, p.config2)) == 1
	})
	p.procs[failing].Systemd.SetJobResult("crio.service", "done")
	p.c.WaitPool(p.pool.Name, 2*time.Minute, "Updated on "+p.config2+" once the reload works", func(s mco.PoolStatus) bool {
		return s.IsTrue("Updated") && s.UpdatedMachineCount == 2 && s.DegradedMachineCount == 0 && s.Configuration == p.config2
	})
	for _, node := range p.nodes {
		if _, boots := p.booted(t, node); boots != 0 {
			t.Errorf("%s: %d boots; want none", node, boots)
		}
	}
}

// TestUpdateWaitsForThePoliciesThenDegrades: MachineConfiguration/cluster's
// spec changed and the operator has not published its status for it yet.
// The update waits, then reports Degraded naming the policies, as the
// daemon does after its 2 min (shortened here); once the status catches
// up the update finishes without a reboot.
func TestUpdateWaitsForThePoliciesThenDegrades(t *testing.T) {
	p := policyPool(t, "ndplag", 1, "--mco-policy-wait", "8s", "--mco-degrade-after", "2s")
	node := p.nodes[0]
	ctx := context.Background()
	t.Cleanup(func() {
		if err := p.c.SetUserDisruptionPolicies(context.Background(), nil); err != nil {
			t.Errorf("remove the user policies: %v", err)
		}
		if err := p.c.PublishDisruptionPolicies(context.Background()); err != nil {
			t.Errorf("publish the policies: %v", err)
		}
	})
	p.startAgents(t)
	p.start(t, mco.Default)
	p.c.WaitPool(p.pool.Name, time.Minute, "Updated on "+p.config1, func(s mco.PoolStatus) bool {
		return s.IsTrue("Updated") && s.UpdatedMachineCount == 1
	})
	// A user policy: SSH key changes reload sshd. The status lags it.
	if err := p.c.SetUserDisruptionPolicies(ctx, map[string]any{"sshkey": map[string]any{"actions": []any{
		map[string]any{"type": "Reload", "reload": map[string]any{"serviceName": "sshd.service"}}}}}); err != nil {
		t.Fatal(err)
	}
	began := time.Now()
	if err := p.c.SetPoolConfig(ctx, p.pool.Name, p.config2); err != nil {
		t.Fatal(err)
	}
	n := p.c.WaitNode(node, 2*time.Minute, "Degraded naming the policies", func(n *corev1.Node) bool {
		return n.Annotations[mco.AnnotationState] == mco.StateDegraded &&
			strings.Contains(n.Annotations[mco.AnnotationReason], "NodeDisruptionPolicyStatus was not ready")
	})
	if waited := time.Since(began); waited < 8*time.Second {
		t.Errorf("Degraded after %s; want the policy wait (8s) first", waited.Round(100*time.Millisecond))
	}
	if got := p.hostFile(t, node, policyFile); got != `{"default":[{"type":"insecureAcceptAnything"}]}` {
		t.Errorf("%s changed while the policies were not known: %q; want the first config's", policyFile, got)
	}
	t.Logf("degraded: %s", n.Annotations[mco.AnnotationReason])
	if err := p.c.PublishDisruptionPolicies(ctx); err != nil {
		t.Fatal(err)
	}
	p.c.WaitPool(p.pool.Name, 2*time.Minute, "Updated on "+p.config2+" once the status caught up", func(s mco.PoolStatus) bool {
		return s.IsTrue("Updated") && s.UpdatedMachineCount == 1 && s.DegradedMachineCount == 0 && s.Configuration == p.config2
	})
	if _, boots := p.booted(t, node); boots != 0 {
		t.Errorf("%s: %d boots; want none", node, boots)
	}
}
