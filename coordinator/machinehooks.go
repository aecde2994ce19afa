package coordinator

// An update holds its Machine's drain: a deletion (a scale-down, a
// remediation, a replacement) that starts while the node updates waits
// for the update to end instead of draining a node that reboots.

import (
	"context"
	"fmt"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/dynamic"

	"github.com/nodeward/nodeward/api/v1alpha1"
)

// machineAPINamed is the row of the API called name.
func machineAPINamed(name string) machineAPI {
	for _, api := range machineAPIs {
		if api.name == name {
			return api
		}
	}
	return machineAPI{}
}

// holdMachineHook puts nodeward's pre-drain hook on node's Machine before
// its grant is written, and checks the Machine is not being deleted once
// the hook is on: a deletion that started before it may be draining
// already. A node without a Machine needs none. An error means no grant.
func (c *Controller) holdMachineHook(ctx context.Context, node string) error {
	r, ok := c.machines.machineOf(node)
	if !ok {
		return nil
	}
	gvr, api := c.machines.servedAs(r.api), c.machineResource(r)
	if err := hookRefused(r); err != nil {
		return err
	}
	style := machineAPINamed(r.api).hook
	if err := style.hold(ctx, api, gvr, r.name); err != nil {
		return fmt.Errorf("hold the pre-drain hook of machine %s/%s: %w", r.namespace, r.name, err)
	}
	m, err := api.Get(ctx, r.name, metav1.GetOptions{})
	if err != nil {
		return fmt.Errorf("read machine %s/%s after holding its hook: %w", r.namespace, r.name, err)
	}
	r.deleting = m.GetDeletionTimestamp() != nil
	if err := hookRefused(r); err != nil {
		_ = style.drop(ctx, api, gvr, r.name)
		return err
	}
	return nil
}

// hookRefused is the one rule of holdMachineHook and MachineToHold: a
// Machine being deleted gets no hook, and its node no grant (its deletion
// may be draining already).
func hookRefused(r machineRecord) error {
	if r.deleting {
		if r.namespace == "" {
			return fmt.Errorf("machine %s is being deleted", r.name)
		}
		return fmt.Errorf("machine %s/%s is being deleted", r.namespace, r.name)
	}
	return nil
}

// machineResource is the client of r's Machine API in r's namespace.
func (c *Controller) machineResource(r machineRecord) dynamic.ResourceInterface {
	return c.opts.Dynamic.Resource(c.machines.servedAs(r.api)).Namespace(r.namespace)
}

// sweepMachineHooks drops nodeward's hook from every Machine whose node
// holds no grant and no slot any more: the update ended however it ended
// (Done, released by its agent or by a pool, Yielded, the node gone), and
// after a crash or a leader change as well. It runs in the worker, between
// passes, so never between a hook written and its grant (sweepMachines).
func (c *Controller) sweepMachineHooks(ctx context.Context, busy func(node string) bool) {
	for _, r := range c.machines.hooked() {
		if busy(r.node) {
			continue
		}
		api := c.machineResource(r)
		if err := machineAPINamed(r.api).hook.drop(ctx, api, c.machines.servedAs(r.api), r.name); err != nil {
			c.opts.Log.Warn("cannot drop the pre-drain hook of a machine whose update ended", "machine", r.namespace+"/"+r.name, "err", err)
			continue
		}
		c.opts.Log.Info("pre-drain hook dropped: the node's update ended", "machine", r.namespace+"/"+r.name, "node", r.node)
	}
}

// updateBusy is the sweeps' one test of whether a Machine's node is still
// mid-update: a grant written and not yet seen back (the expectations), or
// nodeUpdating from the index. A Machine without a node is not. The
// expectations are copied once per sweep, at the first Machine asked about.
func (c *Controller) updateBusy() func(node string) bool {
	var pending map[string]bool
	return func(node string) bool {
		if node == "" {
			return false
		}
		if pending == nil {
			pending = c.expectations.nodes()
		}
		return pending[node] || nodeUpdating(c.index.node(node))
	}
}

// nodeUpdating reports whether n is mid-update: it holds a grant its agent
// has not finished, or its agent's step holds a slot. A grant the agent
// finished (Done, Yielded) and the pool keeps, soaking, is not: the update
// is over, and a deletion of the Machine meanwhile must go on (protocol
// simulator, machines mode, seed 1000023: the soak of a node whose Machine
// was being deleted never ended, for the node no longer served; its hook
// held the deletion, and the pool stalled). Nor is a Degraded node: its
// update is stuck until someone acts, and its Machine's deletion or
// remediation must be able to go on. The one rule of the controller's
// sweep and of the protocol simulator's (HookEnded).
func nodeUpdating(n *corev1.Node) bool {
	if n == nil {
		return false
	}
	a := n.Annotations
	state := v1alpha1.Step(a[v1alpha1.AnnotationState])
	if state == v1alpha1.StepDegraded {
		return false
	}
	grant := a[v1alpha1.AnnotationGrant]
	finished := a[v1alpha1.AnnotationStateGrant] == grant && state.Finished()
	return (grant != "" && !finished) || state.HoldsSlot()
}
