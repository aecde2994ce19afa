package mco

import (
	"context"
	"errors"
	"fmt"
	"time"

	corev1 "k8s.io/api/core/v1"

	"github.com/nodeward/nodeward/api/kube"
	"github.com/nodeward/nodeward/daemon/update"
	"github.com/nodeward/nodeward/drain"
)

// The drain handshake's verbs: desiredDrain is "<verb>-<config>".
const (
	drainVerb    = "drain"
	uncordonVerb = "uncordon"
)

// DrainHandshake moves the node's workloads the way the MCD does since
// OpenShift 4.14: it asks the MCO's drain controller to cordon and drain
// (desiredDrain: drain-<config>) and to uncordon (uncordon-<config>), and
// waits until the controller answers with the same value in
// lastAppliedDrain. The controller drains with its own options (all
// DaemonSets ignored, emptyDir data deleted, unmanaged pods forced, PDBs
// honoured) and retries a blocked drain for as long as it takes.
//
// Own is nodeward's drain, kept for what the controller does not do: the
// lifecycle hooks' conditions, and the pods a scheduler on a stale cache
// bound to the node after the controller drained it (checked right before
// the finalize and the reboot, and evicted by nodeward's PDB-aware drain).
type DrainHandshake struct {
	Client   *kube.Client
	NodeName string
	Node     update.NodeSource
	Own      update.Workloads
	// Wait bounds how long Cordon waits for the controller's cordon
	// before the machine looks again; 20 s when zero.
	Wait time.Duration
}

// Cordon asks the controller to drain the node for its desired config and
// waits for the cordon. A node cordoned by someone else before the request
// is left alone (false), as nodeward's own cordon does.
func (d *DrainHandshake) Cordon(ctx context.Context) (bool, error) {
	node, err := d.Node.Node(ctx)
	if err != nil {
		return false, err
	}
	want := request(drainVerb, node)
	if node.Annotations[AnnotationDesiredDrain] != want {
		if node.Spec.Unschedulable {
			return false, nil
		}
		if err := d.ask(ctx, want); err != nil {
			return false, err
		}
	}
	node, err = d.waitFor(ctx, func(n *corev1.Node) bool { return n.Spec.Unschedulable })
	if err != nil {
		return false, err
	}
	if !node.Spec.Unschedulable {
		return false, fmt.Errorf("%w: asked the MCO drain controller for %s; the node is not cordoned yet", drain.ErrBlocked, want)
	}
	return true, nil
}

// Drain waits for the controller's answer to the drain request, then
// moves what came to the node since with nodeward's own drain.
func (d *DrainHandshake) Drain(ctx context.Context) error {
	return d.drain(ctx, d.Own.Drain)
}

// ForceDrain is Drain, forcing nodeward's own drain of late pods (the
// pool's explicit opt-in); the controller's drain forces unmanaged pods
// by itself.
func (d *DrainHandshake) ForceDrain(ctx context.Context) error {
	return d.drain(ctx, d.Own.ForceDrain)
}

func (d *DrainHandshake) drain(ctx context.Context, own func(context.Context) error) error {
	if err := d.handshake(ctx, drainVerb); err != nil {
		return err
	}
	late, err := d.Own.Undrained(ctx)
	if err != nil || len(late) == 0 {
		return err
	}
	return own(ctx)
}

// handshake asks the drain controller for verb on the node's desired
// config, unless asked already, and returns nil once it answered, an
// error wrapping drain.ErrBlocked while it has not.
func (d *DrainHandshake) handshake(ctx context.Context, verb string) error {
	node, err := d.Node.Node(ctx)
	if err != nil {
		return err
	}
	want := request(verb, node)
	if node.Annotations[AnnotationDesiredDrain] != want {
		if err := d.ask(ctx, want); err != nil {
			return err
		}
	}
	if got := node.Annotations[AnnotationLastAppliedDrain]; got != want {
		return fmt.Errorf("%w: waiting for the MCO drain controller to %s the node (desiredDrain %s, lastAppliedDrain %q)",
			drain.ErrBlocked, verb, want, got)
	}
	return nil
}

// Undrained implements update.Workloads with nodeward's own check.
func (d *DrainHandshake) Undrained(ctx context.Context) ([]drain.PodRef, error) {
	return d.Own.Undrained(ctx)
}

// Uncordon asks the controller to uncordon the node for its desired config
// and waits for the answer.
func (d *DrainHandshake) Uncordon(ctx context.Context) error {
	return d.handshake(ctx, uncordonVerb)
}

// Release implements update.Releaser: the uncordon handshake the daemon
// runs after every update, also after one that drained nothing. A node
// cordoned by someone else is left as it is: an update that cordoned
// nothing has no cordon of its own to lift, and the drain controller's
// uncordon would lift theirs.
func (d *DrainHandshake) Release(ctx context.Context) error {
	node, err := d.Node.Node(ctx)
	if err != nil {
		return err
	}
	if node.Spec.Unschedulable {
		return nil
	}
	return d.handshake(ctx, uncordonVerb)
}

// ReportHooks implements update.Workloads with nodeward's own conditions.
func (d *DrainHandshake) ReportHooks(ctx context.Context, point drain.HookPoint, hooks []drain.Hook) error {
	return d.Own.ReportHooks(ctx, point, hooks)
}

// request is the handshake value for verb on node's desired config.
func request(verb string, node *corev1.Node) string {
	return verb + "-" + node.Annotations[AnnotationDesiredConfig]
}

func (d *DrainHandshake) ask(ctx context.Context, value string) error {
	if _, err := update.PatchAnnotations(ctx, d.Client, d.NodeName, map[string]*string{AnnotationDesiredDrain: &value}); err != nil {
		return fmt.Errorf("ask the MCO drain controller for %s: %w", value, err)
	}
	return nil
}

// waitFor polls the node (a watch's copy) until ok or Wait passes, and
// returns its last copy.
func (d *DrainHandshake) waitFor(ctx context.Context, ok func(*corev1.Node) bool) (*corev1.Node, error) {
	deadline := time.Now().Add(orDefault(d.Wait, 20*time.Second))
	tick := time.NewTicker(200 * time.Millisecond)
	defer tick.Stop()
	for {
		node, err := d.Node.Node(ctx)
		if err != nil || ok(node) || time.Now().After(deadline) {
			return node, err
		}
		select {
		case <-ctx.Done():
			if errors.Is(ctx.Err(), context.DeadlineExceeded) {
				return node, nil
			}
			return node, ctx.Err()
		case <-tick.C:
		}
	}
}
