package mco

import (
	"context"
	"fmt"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/client-go/util/retry"

	"github.com/nodeward/nodeward/disruption"
)

// The machine-config operator merges the default node disruption policies
// with the user's (spec.nodeDisruptionPolicy) into the status of
// MachineConfiguration/cluster, which the daemon reads. The operator does
// not run in these tests: PublishDisruptionPolicies writes that status as
// it would, with nodeward's copy of the operator's default table.

// PublishDisruptionPolicies writes MachineConfiguration/cluster's status
// as the operator does after a sync: the merged policies, and
// observedGeneration caught up with the spec.
func (c *Client) PublishDisruptionPolicies(ctx context.Context) error {
	return retry.RetryOnConflict(retry.DefaultRetry, func() error {
		obj, err := c.Dyn.Resource(MachineConfigurations).Get(ctx, "cluster", metav1.GetOptions{})
		if err != nil {
			return err
		}
		spec, _, _ := unstructured.NestedMap(obj.Object, "spec")
		merged, err := disruption.MergePolicies(spec)
		if err != nil {
			return fmt.Errorf("merge the node disruption policies of MachineConfiguration/cluster: %w", err)
		}
		status, _, _ := unstructured.NestedMap(obj.Object, "status")
		if status == nil {
			status = map[string]any{}
		}
		status["observedGeneration"] = obj.GetGeneration()
		status["nodeDisruptionPolicyStatus"] = disruption.StatusObject(merged)
		obj.Object["status"] = status
		_, err = c.Dyn.Resource(MachineConfigurations).UpdateStatus(ctx, obj, metav1.UpdateOptions{})
		return err
	})
}

// SetUserDisruptionPolicies sets spec.nodeDisruptionPolicy of
// MachineConfiguration/cluster (nil removes it). The status lags the new
// generation until PublishDisruptionPolicies, as while the operator has
// not synced yet.
func (c *Client) SetUserDisruptionPolicies(ctx context.Context, policy map[string]any) error {
	return retry.RetryOnConflict(retry.DefaultRetry, func() error {
		obj, err := c.Dyn.Resource(MachineConfigurations).Get(ctx, "cluster", metav1.GetOptions{})
		if err != nil {
			return err
		}
		if policy == nil {
			unstructured.RemoveNestedField(obj.Object, "spec", "nodeDisruptionPolicy")
		} else if err := unstructured.SetNestedField(obj.Object, policy, "spec", "nodeDisruptionPolicy"); err != nil {
			return err
		}
		_, err = c.Dyn.Resource(MachineConfigurations).Update(ctx, obj, metav1.UpdateOptions{})
		return err
	})
}
