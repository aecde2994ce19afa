package health

import (
	"context"
	"slices"
	"strings"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/nodeward/nodeward/api/kube"
	"github.com/nodeward/nodeward/api/v1alpha1"
	"github.com/nodeward/nodeward/conditions"
)

// CoordinatorGuard is the disruption guard the coordinator publishes
// (docs/protocol.md): a NoExecute taint is allowed only when the node's
// zone is Allowed (or, rate-limited, the node holds a permit) and, on a
// control-plane node, only for the one holder the coordinator named. Any
// error or a missing guard refuses: evicting pods is never the default.
// It is consulted only when a NoExecute row of the policy table turns on,
// so one GET per decision costs nothing at idle.
func CoordinatorGuard(client *kube.Client) conditions.DisruptionGuard {
	return func(ctx context.Context, node *corev1.Node, _ corev1.Taint) bool {
		cm, err := client.ConfigMaps(v1alpha1.AgentLeaseNamespace).Get(ctx, v1alpha1.GuardConfigMapName, metav1.GetOptions{})
		if err != nil {
			return false
		}
		return guardAllows(cm.Data, node)
	}
}

func guardAllows(data map[string]string, node *corev1.Node) bool {
	if _, cp := node.Labels["node-role.kubernetes.io/control-plane"]; cp && data[v1alpha1.GuardControlPlaneHolder] != node.Name {
		return false
	}
	zone := node.Labels["topology.kubernetes.io/zone"]
	if zone == "" {
		zone = v1alpha1.GuardNoZone
	}
	key := v1alpha1.GuardZonePrefix + zone
	switch data[key] {
	case v1alpha1.GuardAllowed:
		return true
	case v1alpha1.GuardRateLimited:
		return slices.Contains(strings.Split(data[key+v1alpha1.GuardPermitsSuffix], ","), node.Name)
	}
	return false
}
