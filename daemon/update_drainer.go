package daemon

import (
	"context"
	"fmt"
	"time"

	corev1 "k8s.io/api/core/v1"
	policyv1 "k8s.io/api/policy/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/fields"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/util/retry"
)

// CordonedByAnnotation records on a Node that nodeward cordoned it, in the
// same write as the cordon, so that a restarted agent knows the cordon is
// its own and never lifts an admin's.
const CordonedByAnnotation = "update.nodeward.io/cordoned-by"

// BasicDrainer is a minimal Drainer over the Eviction API: it evicts every
// pod of the node except DaemonSet and mirror pods and waits for them to
// go. It stands in until the drain package (ordered, hook-aware drains
// with reports) is wired through an adapter.
type BasicDrainer struct {
	Client kubernetes.Interface
	Node   string
	// Poll is how often pod removal is checked; default 250 ms.
	Poll time.Duration
}

// Cordon implements Drainer.
func (d *BasicDrainer) Cordon(ctx context.Context) (bool, error) {
	byUs := false
	err := retry.RetryOnConflict(retry.DefaultBackoff, func() error {
		node, err := d.Client.CoreV1().Nodes().Get(ctx, d.Node, metav1.GetOptions{})
		if err != nil {
			return err
		}
		_, ours := node.Annotations[CordonedByAnnotation]
		if node.Spec.Unschedulable && !ours {
			byUs = false
			return nil
		}
		byUs = true
		if node.Spec.Unschedulable && ours {
			return nil
		}
		node.Spec.Unschedulable = true
		if node.Annotations == nil {
			node.Annotations = map[string]string{}
		}
		node.Annotations[CordonedByAnnotation] = "nodeward"
		// Update carries the resourceVersion: a concurrent admin cordon
		// makes it conflict and we look again.
		_, err = d.Client.CoreV1().Nodes().Update(ctx, node, metav1.UpdateOptions{})
		return err
	})
	if err != nil {
		return false, fmt.Errorf("cordon node %s: %w", d.Node, err)
	}
	return byUs, nil
}

// Uncordon implements Drainer.
func (d *BasicDrainer) Uncordon(ctx context.Context) error {
	err := retry.RetryOnConflict(retry.DefaultBackoff, func() error {
		node, err := d.Client.CoreV1().Nodes().Get(ctx, d.Node, metav1.GetOptions{})
		if err != nil {
			return err
		}
		if _, ours := node.Annotations[CordonedByAnnotation]; !ours {
			return nil
		}
		delete(node.Annotations, CordonedByAnnotation)
		node.Spec.Unschedulable = false
		_, err = d.Client.CoreV1().Nodes().Update(ctx, node, metav1.UpdateOptions{})
		return err
	})
	if err != nil {
		return fmt.Errorf("uncordon node %s: %w", d.Node, err)
	}
	return nil
}

// Drain implements Drainer.
func (d *BasicDrainer) Drain(ctx context.Context) error {
	poll := d.Poll
	if poll <= 0 {
		poll = 250 * time.Millisecond
	}
	for {
		pods, err := d.evictable(ctx)
		if err != nil {
			return err
		}
		if len(pods) == 0 {
			return nil
		}
		var blocked error
		for _, p := range pods {
			if p.DeletionTimestamp != nil {
				continue // already going
			}
			err := d.Client.CoreV1().Pods(p.Namespace).EvictV1(ctx, &policyv1.Eviction{
				ObjectMeta: metav1.ObjectMeta{Name: p.Name, Namespace: p.Namespace},
			})
			switch {
			case err == nil, apierrors.IsNotFound(err):
			case apierrors.IsTooManyRequests(err):
				blocked = fmt.Errorf("evict pod %s/%s: %v: %w", p.Namespace, p.Name, err, ErrDrainBlocked)
			default:
				return fmt.Errorf("evict pod %s/%s: %w", p.Namespace, p.Name, err)
			}
		}
		if blocked != nil {
			// The machine retries after its poll interval; hammering a
			// PDB with evictions does not make it allow one sooner.
			return blocked
		}
		select {
		case <-ctx.Done():
			return fmt.Errorf("wait for %d pods to leave node %s: %w", len(pods), d.Node, ctx.Err())
		case <-time.After(poll):
		}
	}
}

func (d *BasicDrainer) evictable(ctx context.Context) ([]corev1.Pod, error) {
	list, err := d.Client.CoreV1().Pods(metav1.NamespaceAll).List(ctx, metav1.ListOptions{
		FieldSelector: fields.OneTermEqualSelector("spec.nodeName", d.Node).String(),
	})
	if err != nil {
		return nil, fmt.Errorf("list pods of node %s: %w", d.Node, err)
	}
	var out []corev1.Pod
	for _, p := range list.Items {
		if _, mirror := p.Annotations[corev1.MirrorPodAnnotationKey]; mirror {
			continue
		}
		if ref := metav1.GetControllerOf(&p); ref != nil && ref.Kind == "DaemonSet" {
			continue
		}
		if p.Status.Phase == corev1.PodSucceeded || p.Status.Phase == corev1.PodFailed {
			continue
		}
		out = append(out, p)
	}
	return out, nil
}
