package coordinator

import (
	"context"
	"encoding/json"
	"fmt"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/nodeward/nodeward/api/kube"
	"github.com/nodeward/nodeward/api/v1alpha1"
)

// markSilent marks the health of the nodes whose agents went silent
// Unknown, with an Event on each node it changed.
func (c *Controller) markSilent(ctx context.Context, silent []*corev1.Node, now time.Time) []error {
	var errs []error
	for _, n := range silent {
		marked, err := markHealthUnknown(ctx, c.opts.Client, n, now)
		if err != nil {
			errs = append(errs, err)
			continue
		}
		if marked {
			c.events.Event(nodeRef(n.Name), corev1.EventTypeWarning, "AgentSilent",
				"nodeward agent stopped renewing its liveness Lease; its health conditions are now Unknown and the node is not granted")
		}
	}
	return errs
}

// markHealthUnknown sets the nodeward health conditions of a node whose
// agent went silent to Unknown, as the node lifecycle controller does for a
// silent kubelet, so stale health never looks fresh.
func markHealthUnknown(ctx context.Context, client *kube.Client, node *corev1.Node, now time.Time) (bool, error) {
	var conds []corev1.NodeCondition
	for _, cond := range node.Status.Conditions {
		if v1alpha1.IsHealthCondition(cond.Type) && cond.Status != corev1.ConditionUnknown {
			conds = append(conds, corev1.NodeCondition{
				Type: cond.Type, Status: corev1.ConditionUnknown, Reason: "AgentSilent",
				Message:            "nodeward agent stopped renewing its liveness Lease",
				LastHeartbeatTime:  metav1.NewTime(now),
				LastTransitionTime: metav1.NewTime(now),
			})
		}
	}
	if len(conds) == 0 {
		return false, nil
	}
	patch, err := json.Marshal(map[string]any{"status": map[string]any{"conditions": conds}})
	if err != nil {
		return false, err
	}
	if _, err := client.PatchNodeStatus(ctx, node.Name, patch); err != nil {
		return false, fmt.Errorf("mark health Unknown on silent node %s: %w", node.Name, err)
	}
	return true, nil
}
