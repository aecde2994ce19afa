package update

import (
	"context"
	"fmt"
	"strings"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/fields"
	"k8s.io/apimachinery/pkg/labels"

	"github.com/nodeward/nodeward/api/kube"
)

// PodsReadyCheck is a post-update check: after the reboot, the node is
// healthy only once at least one pod matching selector runs on it and every
// such pod is Ready (a CNI or storage DaemonSet, say). It adds to
// Serving; it lists only the node's pods, and only while the
// update waits for health.
func PodsReadyCheck(client *kube.Client, selector labels.Selector) ServiceCheck {
	return func(ctx context.Context, node *corev1.Node) (bool, string, error) {
		if ok, reason, err := Serving(ctx, node); !ok || err != nil {
			return ok, reason, err
		}
		pods, err := client.Pods(metav1.NamespaceAll).List(ctx, metav1.ListOptions{
			LabelSelector: selector.String(),
			FieldSelector: fields.OneTermEqualSelector("spec.nodeName", node.Name).String(),
		})
		if err != nil {
			return false, "", fmt.Errorf("list pods %q on node %s: %w", selector, node.Name, err)
		}
		if len(pods.Items) == 0 {
			return false, fmt.Sprintf("no pod matching %q on the node yet", selector), nil
		}
		var notReady []string
		for i := range pods.Items {
			if p := &pods.Items[i]; !podReady(p) {
				notReady = append(notReady, p.Namespace+"/"+p.Name)
			}
		}
		if len(notReady) > 0 {
			return false, fmt.Sprintf("pods matching %q not Ready: %s", selector, strings.Join(notReady, ", ")), nil
		}
		return true, "", nil
	}
}

func podReady(p *corev1.Pod) bool {
	if p.DeletionTimestamp != nil || p.Status.Phase != corev1.PodRunning {
		return false
	}
	for _, c := range p.Status.Conditions {
		if c.Type == corev1.PodReady {
			return c.Status == corev1.ConditionTrue
		}
	}
	return false
}
