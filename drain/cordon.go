package drain

import (
	"context"
	"encoding/json"
	"fmt"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/util/retry"

	"github.com/nodeward/nodeward/api/kube"
	"github.com/nodeward/nodeward/api/v1alpha1"
)

// CordonOwner is the value nodeward writes in AnnotationCordonedBy.
const CordonOwner = "nodeward"

// FieldManager is the field manager of nodeward's cordon and uncordon
// writes, so that the API server's managedFields name nodeward as the
// manager that last set spec.unschedulable. (Before it was set the manager
// came from the user agent, "nodeward" for the nodeward binary.)
const FieldManager = "nodeward"

// HasCordonRecord reports whether node carries nodeward's record of its own
// cordon; without it a cordon is someone else's. With it, the cordon may
// still be someone else's: the record survives an admin's uncordon and a
// later cordon (CordonedByNodeward).
func HasCordonRecord(node *corev1.Node) bool {
	_, ours := node.Annotations[v1alpha1.AnnotationCordonedBy]
	return ours
}

// CordonedByNodeward reports whether node's current cordon is proved
// nodeward's: the record is there and the API server names nodeward's
// field manager, and no other, as the manager of spec.unschedulable. The
// record alone proves nothing: an admin's kubectl uncordon and kubectl
// cordon after nodeward's cordon leave it, and take the field; the agent
// may have been down and never seen them.
func CordonedByNodeward(node *corev1.Node) bool {
	if !node.Spec.Unschedulable || !HasCordonRecord(node) {
		return false
	}
	managers := unschedulableManagers(node)
	return len(managers) == 1 && managers[0] == FieldManager
}

// CordonTakenOver reports whether node's managedFields name a manager
// other than nodeward's for spec.unschedulable: whatever the record says,
// the cordon is someone else's. A node without managedFields (a model of
// the API) proves nothing either way.
func CordonTakenOver(node *corev1.Node) bool {
	for _, m := range unschedulableManagers(node) {
		if m != FieldManager {
			return true
		}
	}
	return false
}

// unschedulableManagers are the managers node's managedFields name for
// spec.unschedulable.
func unschedulableManagers(node *corev1.Node) []string {
	var managers []string
	for _, entry := range node.ManagedFields {
		if entry.FieldsV1 == nil {
			continue
		}
		var fields struct {
			Spec map[string]json.RawMessage `json:"f:spec"`
		}
		if err := json.Unmarshal(entry.FieldsV1.GetRawBytes(), &fields); err != nil {
			continue // unreadable: proves no ownership
		}
		if _, ok := fields.Spec["f:unschedulable"]; ok {
			managers = append(managers, entry.Manager)
		}
	}
	return managers
}

// Cordon marks the node unschedulable and records, in the same update,
// that nodeward did it. When someone else already cordoned the node it
// changes nothing and returns false; when the cordon is proved nodeward's
// (CordonedByNodeward: a cordon before a crash) it returns true. The
// update carries the resourceVersion, so a concurrent admin cordon
// conflicts and is seen.
func (d *Drainer) Cordon(ctx context.Context) (byNodeward bool, err error) {
	err = kube.RetryOnConflict(retry.DefaultBackoff, func() error {
		node, err := d.client.Nodes().Get(ctx, d.node, metav1.GetOptions{})
		if err != nil {
			return err
		}
		if node.Spec.Unschedulable {
			byNodeward = CordonedByNodeward(node)
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
		_, err = d.client.Nodes().Update(ctx, node, metav1.UpdateOptions{FieldManager: FieldManager})
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
// not proved nodeward's (CordonedByNodeward) is someone else's and stays,
// unless force; the record it may carry is then stale and stays too.
func (d *Drainer) Uncordon(ctx context.Context, force bool) (UncordonResult, error) {
	var result UncordonResult
	err := kube.RetryOnConflict(retry.DefaultBackoff, func() error {
		node, err := d.client.Nodes().Get(ctx, d.node, metav1.GetOptions{})
		if err != nil {
			return err
		}
		ours := HasCordonRecord(node)
		switch {
		case node.Spec.Unschedulable && !CordonedByNodeward(node) && !force:
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
		_, err = d.client.Nodes().Update(ctx, node, metav1.UpdateOptions{FieldManager: FieldManager})
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
