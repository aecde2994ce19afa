package cluster

import (
	"context"
	"fmt"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/util/retry"
)

// PowerOff plays a kwok node going down for a reboot: kwok, its kubelet,
// stops managing it (KwokAnnotation no longer "fake"), and its Ready
// condition turns Unknown as the node lifecycle controller sets it once the
// kubelet stopped posting — written at once instead of after the
// controller's grace period, so that a health check's timeout starts when
// the machine went down.
func PowerOff(ctx context.Context, client kubernetes.Interface, node string) error {
	if err := setKwokAnnotation(ctx, client, node, "powered-off"); err != nil {
		return err
	}
	// Other controllers write the Node meanwhile (the nodelink
	// controller, the agent's last report): read and write again on a
	// conflict.
	err := retry.RetryOnConflict(retry.DefaultRetry, func() error {
		n, err := client.CoreV1().Nodes().Get(ctx, node, metav1.GetOptions{})
		if err != nil {
			return err
		}
		now := metav1.Now()
		for i, c := range n.Status.Conditions {
			if c.Type == corev1.NodeReady {
				n.Status.Conditions[i] = corev1.NodeCondition{Type: corev1.NodeReady, Status: corev1.ConditionUnknown,
					Reason: "NodeStatusUnknown", Message: "Kubelet stopped posting node status.",
					LastHeartbeatTime: c.LastHeartbeatTime, LastTransitionTime: now}
			}
		}
		_, err = client.CoreV1().Nodes().UpdateStatus(ctx, n, metav1.UpdateOptions{})
		return err
	})
	if err != nil {
		return fmt.Errorf("power off node %s: Ready Unknown: %w", node, err)
	}
	return nil
}

// PowerOn gives a powered-off node back to kwok, which sets it Ready as a
// kubelet starting would.
func PowerOn(ctx context.Context, client kubernetes.Interface, node string) error {
	return setKwokAnnotation(ctx, client, node, "fake")
}

func setKwokAnnotation(ctx context.Context, client kubernetes.Interface, node, value string) error {
	patch := fmt.Appendf(nil, `{"metadata":{"annotations":{%q:%q}}}`, KwokAnnotation, value)
	if _, err := client.CoreV1().Nodes().Patch(ctx, node, types.MergePatchType, patch, metav1.PatchOptions{}); err != nil {
		return fmt.Errorf("set %s=%s on node %s: %w", KwokAnnotation, value, node, err)
	}
	return nil
}
