package chaos

import (
	"context"
	"fmt"
	"time"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/nodeward/nodeward/test/cluster"
)

// The DeleteNodeRebooting fault: a Node object deleted while its machine
// is down for the reboot its agent asked for, and registered again by the
// machine's kubelet when it boots.

// departWait bounds the wait for a granted node to reboot.
const departWait = 90 * time.Second

// willReboot reports whether a node in step holding a grant has its
// reboot still ahead.
func willReboot(v NodeView) bool {
	if v.Grant == "" {
		return false
	}
	switch v.State {
	case "", "Idle", "Staging", "Staged", "Granted", "HooksPreDrain", "Cordoning", "Draining", "HooksPreReboot", "Finalizing":
		return true
	}
	return false
}

// deleteNodeRebooting arms a reboot hook on every granted node whose
// reboot is ahead (and on those granted later, for up to departWait): the
// first of them to go down has its Node deleted, stays down for Hold, and
// registers its Node again when it boots. The fault runs in the
// background; the run waits for it like for an undo.
func (in *Injector) deleteNodeRebooting(ctx context.Context, r *Record, _ int) error {
	saved := map[string]*corev1.Node{}
	h := NewRebootHook(r.Hold, func(ctx context.Context, name string) {
		n, detail := in.deleteNode(ctx, name)
		in.mu.Lock()
		r.Victim, r.Detail, saved[name] = name, detail, n
		in.mu.Unlock()
	}, func(ctx context.Context, name string) {
		in.mu.Lock()
		n := saved[name]
		in.mu.Unlock()
		if n != nil {
			in.registerNode(ctx, n)
		}
	})
	in.undos.Go(func() {
		in.awaitDeparture(ctx, r, h)
	})
	r.Detail = "armed on the granted nodes"
	return nil
}

// awaitDeparture arms h on the nodes about to reboot until one claims it
// or departWait passes, then waits for the claiming machine to boot.
func (in *Injector) awaitDeparture(ctx context.Context, r *Record, h *RebootHook) {
	armed := map[string]bool{}
	deadline := time.Now().Add(departWait)
	for h.Claimed() == "" && time.Now().Before(deadline) && ctx.Err() == nil {
		for _, v := range in.Watcher.Nodes() {
			if !armed[v.Name] && willReboot(v) {
				armed[v.Name] = true
				in.Machines[v.Name].Arm(h)
			}
		}
		sleep(ctx, 200*time.Millisecond)
	}
	if h.Withdraw() {
		select {
		case <-h.Done():
		case <-ctx.Done():
		}
	}
	for name := range armed {
		in.Machines[name].Disarm(h)
	}
	in.mu.Lock()
	defer in.mu.Unlock()
	if r.Victim == "" {
		r.Skipped, r.Detail = true, fmt.Sprintf("no granted node rebooted within %s", departWait)
		return
	}
	r.Undone = time.Now()
}

// deleteNode deletes the Node (as a cloud controller would), retrying for
// up to two minutes, and returns what it was; nil when it could not be read.
func (in *Injector) deleteNode(ctx context.Context, name string) (*corev1.Node, string) {
	var n *corev1.Node
	err := in.retry(ctx, func(ctx context.Context) error {
		var err error
		if n, err = in.Client.CoreV1().Nodes().Get(ctx, name, metav1.GetOptions{}); err != nil {
			return err
		}
		err = in.Client.CoreV1().Nodes().Delete(ctx, name, metav1.DeleteOptions{Preconditions: &metav1.Preconditions{UID: &n.UID}})
		if apierrors.IsNotFound(err) {
			return nil
		}
		return err
	})
	if err != nil || n == nil {
		return nil, fmt.Sprintf("Node not deleted: %v", err)
	}
	a := n.Annotations
	return n, fmt.Sprintf("Node deleted while its machine was down (state %s, grant %q of pool %s)",
		a[keyState], a[keyGrant], a[keyGrantPool])
}

// registerNode creates the Node again as its kubelet registers it: the
// same name, labels and capacity, schedulable, none of the annotations
// anyone else wrote (nodeward's included), a new UID.
func (in *Injector) registerNode(ctx context.Context, old *corev1.Node) {
	n := &corev1.Node{
		ObjectMeta: metav1.ObjectMeta{Name: old.Name, Labels: old.Labels,
			Annotations: map[string]string{cluster.KwokAnnotation: "fake", "node.alpha.kubernetes.io/ttl": "0"}},
		Status: corev1.NodeStatus{Capacity: old.Status.Capacity, Allocatable: old.Status.Allocatable},
	}
	err := in.retry(ctx, func(ctx context.Context) error {
		_, err := in.Client.CoreV1().Nodes().Create(ctx, n, metav1.CreateOptions{})
		if apierrors.IsAlreadyExists(err) {
			return nil
		}
		return err
	})
	if err != nil {
		in.Log("register node %s again: %v", old.Name, err)
	}
}
