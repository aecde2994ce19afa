package coordinator

import (
	coordinationv1 "k8s.io/api/coordination/v1"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
)

// trimNode drops from a Node, before the informer stores it, what the
// coordinator never reads: the managed fields (every writer's field
// ownership, often the largest part of a Node's object) and the list of
// the node's container images. At 10,000 nodes the Node cache is most of
// the coordinator's memory, and every plan pass walks it. The coordinator
// never writes a cached Node back (it patches), so nothing dropped here
// can be erased on the server.
func trimNode(obj any) (any, error) {
	if n, ok := obj.(*corev1.Node); ok {
		n.ManagedFields = nil
		n.Status.Images = nil
	}
	return obj, nil
}

// trimLease keeps of an agent's Lease what its liveness needs (leaseAlive):
// the renewal time and duration, with the Lease's identity. The agents
// renew 125 Leases a second at 10,000 nodes; a pass reads every one.
func trimLease(obj any) (any, error) {
	l, ok := obj.(*coordinationv1.Lease)
	if !ok {
		return obj, nil
	}
	return &coordinationv1.Lease{
		ObjectMeta: metav1.ObjectMeta{Name: l.Name, Namespace: l.Namespace, UID: l.UID, ResourceVersion: l.ResourceVersion},
		Spec:       coordinationv1.LeaseSpec{RenewTime: l.Spec.RenewTime, LeaseDurationSeconds: l.Spec.LeaseDurationSeconds},
	}, nil
}
