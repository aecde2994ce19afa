package chaos

import (
	"context"
	"fmt"
	"sync"
	"time"

	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	policyv1 "k8s.io/api/policy/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/intstr"
	"k8s.io/utils/ptr"
)

// The faults that block a node's update from outside: an admin's cordon
// and a PDB-blocked pod.

// adminCordon cordons like `kubectl cordon` (spec.unschedulable, no
// nodeward record), only if the node is schedulable and carries no cordon
// record at the resourceVersion read, and uncordons after Hold, when no
// nodeward cordon record is on the node.
func (in *Injector) adminCordon(ctx context.Context, r *Record) error {
	nodes := in.Client.CoreV1().Nodes()
	err := in.retry(ctx, func(ctx context.Context) error {
		n, err := nodes.Get(ctx, r.Victim, metav1.GetOptions{})
		if err != nil {
			return err
		}
		if _, rec := n.Annotations[keyCordonedBy]; rec || n.Spec.Unschedulable {
			r.Skipped, r.Detail = true, "cordoned meanwhile"
			return nil
		}
		r.Detail = fmt.Sprintf("state %s, grant %q", n.Annotations[keyState], n.Annotations[keyGrant])
		in.Watcher.AdminCordoned(r.Victim)
		n.Spec.Unschedulable = true
		if _, err := nodes.Update(ctx, n, metav1.UpdateOptions{}); err != nil {
			in.Watcher.AdminUncordoned(r.Victim) // did not land: read again (a conflict) or retry
			return err
		}
		return nil
	})
	if err != nil || r.Skipped {
		return err
	}
	in.later(ctx, r, r.Hold, func(ctx context.Context) error {
		cctx, cancel := context.WithTimeout(ctx, 10*time.Second)
		defer cancel()
		n, err := nodes.Get(cctx, r.Victim, metav1.GetOptions{})
		if err != nil {
			return err
		}
		if !n.Spec.Unschedulable {
			in.Watcher.AdminUncordoned(r.Victim) // someone else uncordoned: already recorded
			return nil
		}
		if _, rec := n.Annotations[keyCordonedBy]; rec {
			return fmt.Errorf("node carries a nodeward cordon record over the admin's cordon; waiting")
		}
		in.Watcher.AdminUncordoned(r.Victim)
		n.Spec.Unschedulable = false
		if _, err := nodes.Update(cctx, n, metav1.UpdateOptions{}); err != nil {
			in.Watcher.AdminCordoned(r.Victim)
			return err
		}
		return nil
	})
	return nil
}

// pdbBlock pins a ReplicaSet's pod to the node under a PDB that allows no
// disruption, and deletes both after Hold.
func (in *Injector) pdbBlock(ctx context.Context, r *Record, seq int) error {
	name := fmt.Sprintf("pin-%d", seq)
	labels := map[string]string{"app": name}
	rs := &appsv1.ReplicaSet{
		ObjectMeta: metav1.ObjectMeta{Name: name, Namespace: in.PinNamespace},
		Spec: appsv1.ReplicaSetSpec{
			Replicas: ptr.To[int32](1),
			Selector: &metav1.LabelSelector{MatchLabels: labels},
			Template: corev1.PodTemplateSpec{
				ObjectMeta: metav1.ObjectMeta{Labels: labels},
				Spec: corev1.PodSpec{
					NodeSelector:                  map[string]string{"kubernetes.io/hostname": r.Victim},
					TerminationGracePeriodSeconds: ptr.To[int64](1),
					Containers:                    []corev1.Container{{Name: "pinned", Image: "registry.invalid/pinned:1"}},
				},
			},
		},
	}
	pdb := &policyv1.PodDisruptionBudget{
		ObjectMeta: metav1.ObjectMeta{Name: name, Namespace: in.PinNamespace},
		Spec: policyv1.PodDisruptionBudgetSpec{
			MaxUnavailable: ptr.To(intstr.FromInt32(0)),
			Selector:       &metav1.LabelSelector{MatchLabels: labels},
		},
	}
	r.Detail = in.PinNamespace + "/" + name
	if err := in.retry(ctx, func(ctx context.Context) error {
		_, err := in.Client.PolicyV1().PodDisruptionBudgets(in.PinNamespace).Create(ctx, pdb, metav1.CreateOptions{})
		if apierrors.IsAlreadyExists(err) {
			return nil
		}
		return err
	}); err != nil {
		return err
	}
	if err := in.retry(ctx, func(ctx context.Context) error {
		_, err := in.Client.AppsV1().ReplicaSets(in.PinNamespace).Create(ctx, rs, metav1.CreateOptions{})
		if apierrors.IsAlreadyExists(err) {
			return nil
		}
		return err
	}); err != nil {
		return err
	}
	// The pod's UID goes to the watcher once it is bound, in the
	// background, unless the blocker is being lifted by then.
	var mu sync.Mutex
	uid, lifted := "", false
	in.undos.Go(func() {
		u := in.boundPod(ctx, r.Victim, labels)
		mu.Lock()
		defer mu.Unlock()
		if u != "" && !lifted {
			uid = u
			in.Watcher.Pinned(r.Victim, u)
		}
	})
	in.later(ctx, r, r.Hold, func(ctx context.Context) error {
		mu.Lock()
		lifted = true
		if uid != "" {
			in.Watcher.Unpinned(uid)
		}
		mu.Unlock()
		cctx, cancel := context.WithTimeout(ctx, 10*time.Second)
		defer cancel()
		err := in.Client.AppsV1().ReplicaSets(in.PinNamespace).Delete(cctx, name,
			metav1.DeleteOptions{PropagationPolicy: ptr.To(metav1.DeletePropagationBackground)})
		if err != nil && !apierrors.IsNotFound(err) {
			return err
		}
		err = in.Client.PolicyV1().PodDisruptionBudgets(in.PinNamespace).Delete(cctx, name, metav1.DeleteOptions{})
		if err != nil && !apierrors.IsNotFound(err) {
			return err
		}
		return nil
	})
	return nil
}

// boundPod waits up to 10 s for the pinned pod to run on node and returns
// its UID ("" when it does not: the node was cordoned first, and the pod
// blocks nothing, or the scheduler is slow after a crash). Running, not
// only bound: the eviction API lets a Pending pod go whatever its budget
// says, so a pod evicted before its kubelet started it was never a
// blocker (seed 4242 once counted one as forced under Retry).
func (in *Injector) boundPod(ctx context.Context, node string, labels map[string]string) string {
	deadline := time.Now().Add(10 * time.Second)
	for time.Now().Before(deadline) && ctx.Err() == nil {
		lctx, cancel := context.WithTimeout(ctx, 3*time.Second)
		pods, err := in.Client.CoreV1().Pods(in.PinNamespace).List(lctx, metav1.ListOptions{
			LabelSelector: metav1.FormatLabelSelector(&metav1.LabelSelector{MatchLabels: labels})})
		cancel()
		if err == nil {
			for _, p := range pods.Items {
				if p.Spec.NodeName == node && p.DeletionTimestamp == nil && p.Status.Phase == corev1.PodRunning {
					return string(p.UID)
				}
			}
		}
		sleep(ctx, 250*time.Millisecond)
	}
	return ""
}
