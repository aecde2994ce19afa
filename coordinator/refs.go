package coordinator

import (
	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/types"

	"github.com/nodeward/nodeward/api/v1alpha1"
)

func poolRef(pool *v1alpha1.UpdatePool) *corev1.ObjectReference {
	return &corev1.ObjectReference{APIVersion: v1alpha1.GroupName + "/" + v1alpha1.Version, Kind: "UpdatePool",
		Name: pool.Name, UID: pool.UID}
}

// nodeRef references a Node for Events; Node events live in "default"
// as the kubelet's do.
func nodeRef(name string) *corev1.ObjectReference {
	return &corev1.ObjectReference{APIVersion: "v1", Kind: "Node", Name: name, UID: types.UID(name)}
}
