package drain

import (
	"context"
	"fmt"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/util/retry"

	"github.com/nodeward/nodeward/api/kube"
	"github.com/nodeward/nodeward/api/v1alpha1"
)

// CordonOwner is the value nodeward writes in AnnotationCordonedBy.
const CordonOwner = "nodeward"

// HasCordonRecord reports whether node carries nodeward's record of its own
// cordon; without it a cordon is someone else's.
func HasCordonRecord(node *corev1.Node) bool {
	_, ours := node.Annotations[v1alpha1.AnnotationCordonedBy]
	return ours
}

// Cordon marks the node unschedulable and records, in the same update,
// that nodeward did it. When someone else already cordoned the node it
// changes nothing and returns false; when nodeward's own record is there
// (a cordon before a crash) it returns true. The update carries the
// resourceVersion, so a concurrent admin cordon conflicts and is seen.
func (d *Drainer) Cordon(ctx context.Context) (byNodeward bool, err error) {
	err = kube.RetryOnConflict(retry.DefaultBackoff, func() error {
		node, err := d.client.Nodes().Get(ctx, d.node, metav1.GetOptions{})
		if err != nil {
			return err
		}
		ours := HasCordonRecord(node)
		if node.Spec.Unschedulable {
			byNodeward = ours
			return nil
		}
		byNodeward = true
		if d.opts.DryRun {
			return nil
		}
		node.Spec.Unschedulable = true
		if node.Annotations == nil {
			node.Annotations = map[string]string{}
		}
		node.Annotations[v1alpha1.AnnotationCordonedBy] = CordonOwner
		_, err = d.client.Nodes().Update(ctx, node, metav1.UpdateOptions{})
		return err
	})
	if err != nil {
		return false, fmt.Errorf("cordon node %s: %w", d.node, err)
	}
	return byNodeward, nil
}

// UncordonResult says what Uncordon found and did.
type UncordonResult string

const (
	Uncordoned UncordonResult = "uncordoned"
	// NotCordoned: the node was schedulable already (a stale record of
	// nodeward's is still removed).
	NotCordoned UncordonResult = "not cordoned"
	// CordonedByOther: someone else cordoned the node; left as it is.
	CordonedByOther UncordonResult = "cordoned by someone else; left cordoned"
)

// Uncordon lifts nodeward's own cordon and removes its record. A cordon
// without nodeward's record is someone else's and stays, unless force.
func (d *Drainer) Uncordon(ctx context.Context, force bool) (UncordonResult, error) {
	var result UncordonResult
	err := kube.RetryOnConflict(retry.DefaultBackoff, func() error {
		node, err := d.client.Nodes().Get(ctx, d.node, metav1.GetOptions{})
		if err != nil {
			return err
		}
		ours := HasCordonRecord(node)
		switch {
		case node.Spec.Unschedulable && !ours && !force:
			result = CordonedByOther
			return nil
		case !node.Spec.Unschedulable && !ours:
			result = NotCordoned
			return nil
		case !node.Spec.Unschedulable:
			result = NotCordoned
		default:
			result = Uncordoned
		}
		if d.opts.DryRun {
			return nil
		}
		delete(node.Annotations, v1alpha1.AnnotationCordonedBy)
		node.Spec.Unschedulable = false
		_, err = d.client.Nodes().Update(ctx, node, metav1.UpdateOptions{})
		return err
	})
	if err != nil {
		return "", fmt.Errorf("uncordon node %s: %w", d.node, err)
	}
	d.budgets.finished() // the drain, if any, is over
	// A yielded drain's blocking report stays: it says why the node gave
	// its slot back. Otherwise the node no longer counts as drained.
	if result == Uncordoned && !d.drainedIs(ctx, corev1.ConditionFalse, "DrainBlocked", "DrainRefused") {
		d.setDrained(ctx, corev1.ConditionFalse, "Uncordoned", "schedulable again after nodeward's drain")
	}
	return result, nil
}
