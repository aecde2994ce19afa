package node_test

import (
	"context"
	"fmt"
	"time"

	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/wait"
	"k8s.io/client-go/kubernetes"

	"github.com/nodeward/nodeward/test/node"
)

// waitAgentReady waits for the agent DaemonSet's pod on nodeName to be
// Running with every container ready.
func waitAgentReady(ctx context.Context, client kubernetes.Interface, nodeName string, timeout time.Duration) (*corev1.Pod, error) {
	var found *corev1.Pod
	var last string
	err := wait.PollUntilContextTimeout(ctx, 200*time.Millisecond, timeout, true, func(ctx context.Context) (bool, error) {
		pods, err := client.CoreV1().Pods(agentNamespace).List(ctx, metav1.ListOptions{
			LabelSelector: "app.kubernetes.io/name=nodeward-agent", FieldSelector: "spec.nodeName=" + nodeName,
		})
		if err != nil || len(pods.Items) == 0 {
			last = fmt.Sprintf("no agent pod (%v)", err)
			return false, nil
		}
		p := &pods.Items[0]
		last = fmt.Sprintf("pod %s phase %s, containers %+v", p.Name, p.Status.Phase, p.Status.ContainerStatuses)
		if p.Status.Phase != corev1.PodRunning || len(p.Status.ContainerStatuses) == 0 {
			return false, nil
		}
		for _, c := range p.Status.ContainerStatuses {
			if c.RestartCount >= 3 {
				return false, fmt.Errorf("container %s restarted %d times: %s", c.Name, c.RestartCount, last)
			}
			if !c.Ready {
				return false, nil
			}
		}
		found = p
		return true, nil
	})
	if err != nil {
		return nil, fmt.Errorf("waiting for the agent pod Running and Ready: %w; last: %s", err, last)
	}
	return found, nil
}

// waitNode waits until check accepts the Node.
func waitNode(ctx context.Context, client kubernetes.Interface, name string, timeout time.Duration, check func(*corev1.Node) error) error {
	var last error
	err := wait.PollUntilContextTimeout(ctx, 200*time.Millisecond, timeout, true, func(ctx context.Context) (bool, error) {
		n, err := client.CoreV1().Nodes().Get(ctx, name, metav1.GetOptions{})
		if err != nil {
			return false, nil // the deadline's error says enough; keep the last check's
		}
		last = check(n)
		return last == nil, nil
	})
	if err != nil {
		return fmt.Errorf("waiting on node %s: %w (last: %v)", name, err, last)
	}
	return nil
}

func condition(n *corev1.Node, t corev1.NodeConditionType) *corev1.NodeCondition {
	for i := range n.Status.Conditions {
		if n.Status.Conditions[i].Type == t {
			return &n.Status.Conditions[i]
		}
	}
	return nil
}

func conditionIs(t corev1.NodeConditionType, status corev1.ConditionStatus) func(*corev1.Node) error {
	return func(n *corev1.Node) error {
		c := condition(n, t)
		if c == nil {
			return fmt.Errorf("no %s", t)
		}
		if c.Status != status {
			return fmt.Errorf("%s=%s (%s: %s)", t, c.Status, c.Reason, c.Message)
		}
		return nil
	}
}

// workloadReplicaSet runs one pod of the pause image on nodeName: a real
// container under a controller, which `nodeward drain` evicts. On the host
// network: the node's CNI network is loopback alone (config.go), which
// containerd refuses for a pod network ("failed to find network info").
func workloadReplicaSet(namespace, nodeName string) *appsv1.ReplicaSet {
	labels := map[string]string{"app": "drain-me"}
	one := int32(1)
	grace := int64(5)
	return &appsv1.ReplicaSet{
		ObjectMeta: metav1.ObjectMeta{Name: "drain-me", Namespace: namespace},
		Spec: appsv1.ReplicaSetSpec{
			Replicas: &one,
			Selector: &metav1.LabelSelector{MatchLabels: labels},
			Template: corev1.PodTemplateSpec{
				ObjectMeta: metav1.ObjectMeta{Labels: labels},
				Spec: corev1.PodSpec{
					HostNetwork:                   true,
					NodeSelector:                  map[string]string{"kubernetes.io/hostname": nodeName},
					TerminationGracePeriodSeconds: &grace,
					AutomountServiceAccountToken:  new(bool),
					Containers: []corev1.Container{{
						Name: "pause", Image: node.SandboxImage, ImagePullPolicy: corev1.PullNever,
					}},
				},
			},
		},
	}
}
