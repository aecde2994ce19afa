package mco

import (
	"context"
	"encoding/json"
	"fmt"
	"maps"
	"strings"
	"time"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"

	"github.com/nodeward/nodeward/test/cluster"
)

// The node annotations of the MCO's protocol (pkg/daemon/constants). They
// are spelled out here rather than taken from nodeward's daemon/mco so that
// a typo there shows up as a failing test here.
const (
	AnnotationCurrentConfig    = "machineconfiguration.openshift.io/currentConfig"
	AnnotationDesiredConfig    = "machineconfiguration.openshift.io/desiredConfig"
	AnnotationState            = "machineconfiguration.openshift.io/state"
	AnnotationReason           = "machineconfiguration.openshift.io/reason"
	AnnotationDesiredDrain     = "machineconfiguration.openshift.io/desiredDrain"
	AnnotationLastAppliedDrain = "machineconfiguration.openshift.io/lastAppliedDrain"
	AnnotationCurrentImage     = "machineconfiguration.openshift.io/currentImage"
	AnnotationDesiredImage     = "machineconfiguration.openshift.io/desiredImage"
	// AnnotationTopology is what the node controller copies from the
	// ControllerConfig onto every node of a pool it syncs.
	AnnotationTopology = "machineconfiguration.openshift.io/controlPlaneTopology"
)

// Daemon states (annotation state).
const (
	StateDone           = "Done"
	StateWorking        = "Working"
	StateDegraded       = "Degraded"
	StateUnreconcilable = "Unreconcilable"
)

// UpdateInProgressTaint is the key of the PreferNoSchedule taint the node
// controller puts on every node of a pool still to reach the pool's config.
const UpdateInProgressTaint = "UpdateInProgress"

// ProvisionedAnnotations are what the machine config server writes on a
// node at provisioning (examples/40-nodes.yaml): without them the node
// controller counts the node unavailable and never picks it.
func ProvisionedAnnotations(config string) map[string]string {
	return map[string]string{
		AnnotationCurrentConfig: config, AnnotationDesiredConfig: config, AnnotationState: StateDone,
	}
}

// CreateNodes creates spec.Count kwok nodes (see cluster.CreateNodes) that
// belong to pool and are provisioned with the pool's config. When the test
// ends it also deletes their MachineConfigNodes, which the drain controller
// (or a daemon) may have created and nothing else would remove.
func (c *Client) CreateNodes(cp *cluster.ControlPlane, spec cluster.NodeSpec, pool Pool) []string {
	c.t.Helper()
	spec.Labels = merged(spec.Labels, pool.NodeLabels())
	spec.Annotations = merged(spec.Annotations, ProvisionedAnnotations(pool.Config))
	names := cp.CreateNodes(c.t, spec)
	c.t.Cleanup(func() {
		for _, n := range names {
			err := c.Dyn.Resource(MachineConfigNodes).Delete(context.Background(), n, metav1.DeleteOptions{})
			if err != nil && !apierrors.IsNotFound(err) {
				c.t.Errorf("delete MachineConfigNode %s: %v", n, err)
			}
		}
	})
	return names
}

// PrepareNodes turns existing nodes (test/e2e's, say) into members of pool,
// provisioned with its config.
func (c *Client) PrepareNodes(ctx context.Context, names []string, pool Pool) error {
	labels := map[string]any{}
	for k, v := range pool.NodeLabels() {
		labels[k] = v
	}
	annotations := map[string]any{}
	for k, v := range ProvisionedAnnotations(pool.Config) {
		annotations[k] = v
	}
	for _, n := range names {
		if err := c.patchNode(ctx, n, map[string]any{"metadata": map[string]any{"labels": labels, "annotations": annotations}}); err != nil {
			return err
		}
	}
	return nil
}

func merged(a, b map[string]string) map[string]string {
	out := maps.Clone(a)
	if out == nil {
		out = map[string]string{}
	}
	maps.Copy(out, b)
	return out
}

// SetAnnotations merge-patches node's annotations; a nil value removes one.
func (c *Client) SetAnnotations(ctx context.Context, node string, annotations map[string]*string) error {
	return c.patchNode(ctx, node, map[string]any{"metadata": map[string]any{"annotations": annotations}})
}

// CompleteUpdate plays the daemon finishing an update: currentConfig takes
// the value of desiredConfig and state becomes Done. It returns the config.
func (c *Client) CompleteUpdate(ctx context.Context, node string) (string, error) {
	n, err := c.Kube.CoreV1().Nodes().Get(ctx, node, metav1.GetOptions{})
	if err != nil {
		return "", err
	}
	desired := n.Annotations[AnnotationDesiredConfig]
	if desired == "" {
		return "", fmt.Errorf("node %s has no desiredConfig", node)
	}
	done := StateDone
	return desired, c.SetAnnotations(ctx, node, map[string]*string{AnnotationCurrentConfig: &desired, AnnotationState: &done})
}

// RequestDrain writes desiredDrain as the daemon does: verb is "drain" or
// "uncordon", config the rendered config it is for.
func (c *Client) RequestDrain(ctx context.Context, node, verb, config string) (string, error) {
	value := verb + "-" + config
	return value, c.SetAnnotations(ctx, node, map[string]*string{AnnotationDesiredDrain: &value})
}

func (c *Client) patchNode(ctx context.Context, node string, patch map[string]any) error {
	data, err := json.Marshal(patch)
	if err != nil {
		return err
	}
	if _, err := c.Kube.CoreV1().Nodes().Patch(ctx, node, types.MergePatchType, data, metav1.PatchOptions{}); err != nil {
		return fmt.Errorf("patch node %s: %w", node, err)
	}
	return nil
}

// WaitNode polls node until cond holds, failing the test after timeout.
func (c *Client) WaitNode(node string, timeout time.Duration, what string, cond func(*corev1.Node) bool) *corev1.Node {
	c.t.Helper()
	var last *corev1.Node
	cluster.WaitFor(c.t, timeout, fmt.Sprintf("node %s: %s", node, what), func(ctx context.Context) (bool, error) {
		n, err := c.Kube.CoreV1().Nodes().Get(ctx, node, metav1.GetOptions{})
		if err != nil {
			return false, err
		}
		last = n
		if cond(n) {
			return true, nil
		}
		return false, fmt.Errorf("annotations %v unschedulable %v taints %v", mcoAnnotations(n), n.Spec.Unschedulable, n.Spec.Taints)
	})
	return last
}

// mcoAnnotations are node's machineconfiguration.openshift.io annotations,
// for failure messages.
func mcoAnnotations(n *corev1.Node) map[string]string {
	out := map[string]string{}
	for k, v := range n.Annotations {
		if short, ok := strings.CutPrefix(k, "machineconfiguration.openshift.io/"); ok {
			out[short] = v
		}
	}
	return out
}

// HasTaint reports whether node carries a taint with key.
func HasTaint(n *corev1.Node, key string) bool {
	for _, t := range n.Spec.Taints {
		if t.Key == key {
			return true
		}
	}
	return false
}

// Unavailable is the node controller's "unavailable for update" (MCO
// pkg/controller/common LayeredNodeState.IsUnavailableForUpdate, read at
// 7ff337a4), which it counts against maxUnavailable:
//   - not ready: Ready not True, DiskPressure or NetworkUnavailable not False
//     (when reported), or unschedulable; else
//   - not done (currentConfig and desiredConfig set and equal, the image
//     annotations absent or set and equal, state Done), unless the daemon
//     failed: configs differ and state is Degraded or Unreconcilable, which
//     frees the node to be retargeted.
func Unavailable(n *corev1.Node) bool {
	if !nodeReady(n) {
		return true
	}
	if nodeDone(n) {
		return false
	}
	a := n.Annotations
	failing := a[AnnotationCurrentConfig] != a[AnnotationDesiredConfig] &&
		(a[AnnotationState] == StateDegraded || a[AnnotationState] == StateUnreconcilable)
	return !failing
}

func nodeReady(n *corev1.Node) bool {
	for _, c := range n.Status.Conditions {
		switch {
		case c.Type == corev1.NodeReady && c.Status != corev1.ConditionTrue,
			c.Type == corev1.NodeDiskPressure && c.Status != corev1.ConditionFalse,
			c.Type == corev1.NodeNetworkUnavailable && c.Status != corev1.ConditionFalse:
			return false
		}
	}
	return !n.Spec.Unschedulable
}

func nodeDone(n *corev1.Node) bool {
	a := n.Annotations
	current, desired := a[AnnotationCurrentConfig], a[AnnotationDesiredConfig]
	if current == "" || desired == "" || current != desired {
		return false
	}
	curImg, hasCur := a[AnnotationCurrentImage]
	desImg, hasDes := a[AnnotationDesiredImage]
	if (hasCur || hasDes) && (curImg == "" || desImg == "" || curImg != desImg) {
		return false
	}
	return a[AnnotationState] == StateDone
}
