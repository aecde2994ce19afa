package mco_test

import (
	"context"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/utils/ptr"

	"github.com/nodeward/nodeward/test/cluster"
	"github.com/nodeward/nodeward/test/mco"
)

// TestRealDrainControllerCordonsAndUncordons: the daemon asks the drain
// controller with desiredDrain; "drain-<config>" cordons the node and
// drains it (a pod on it is evicted), "uncordon-<config>" uncordons it, and
// each time the controller answers by copying the value to
// lastAppliedDrain. The node must belong to a pool: the drain controller
// looks its pool up first.
func TestRealDrainControllerCordonsAndUncordons(t *testing.T) {
	f := newFixture(t, "drain", 1)
	ctx := context.Background()
	node := f.nodes[0]
	ns := f.cp.Namespace(t)
	pod := &corev1.Pod{
		ObjectMeta: metav1.ObjectMeta{Name: "victim", Namespace: ns},
		Spec: corev1.PodSpec{
			NodeSelector:                  map[string]string{cluster.GroupLabel: "drain"},
			TerminationGracePeriodSeconds: ptr.To[int64](1),
			Containers:                    []corev1.Container{{Name: "app", Image: "registry.invalid/app:1"}},
		},
	}
	if _, err := f.c.Kube.CoreV1().Pods(ns).Create(ctx, pod, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	cluster.WaitFor(t, time.Minute, "pod running on "+node, func(ctx context.Context) (bool, error) {
		p, err := f.c.Kube.CoreV1().Pods(ns).Get(ctx, "victim", metav1.GetOptions{})
		return err == nil && p.Spec.NodeName == node && p.Status.Phase == corev1.PodRunning, err
	})
	f.start(t, mco.Default)

	began := time.Now()
	drain, err := f.c.RequestDrain(ctx, node, "drain", f.config2)
	if err != nil {
		t.Fatal(err)
	}
	f.c.WaitNode(node, time.Minute, "cordoned, lastAppliedDrain="+drain, func(n *corev1.Node) bool {
		return n.Spec.Unschedulable && n.Annotations[mco.AnnotationLastAppliedDrain] == drain
	})
	t.Logf("drain answered in %s", time.Since(began).Round(10*time.Millisecond))
	// lastAppliedDrain is written only after the drain finished, so the
	// pod must already be gone (not merely terminating).
	if _, err := f.c.Kube.CoreV1().Pods(ns).Get(ctx, "victim", metav1.GetOptions{}); !apierrors.IsNotFound(err) {
		t.Errorf("pod still there after the drain was reported done: %v", err)
	}

	began = time.Now()
	uncordon, err := f.c.RequestDrain(ctx, node, "uncordon", f.config2)
	if err != nil {
		t.Fatal(err)
	}
	f.c.WaitNode(node, time.Minute, "uncordoned, lastAppliedDrain="+uncordon, func(n *corev1.Node) bool {
		return !n.Spec.Unschedulable && n.Annotations[mco.AnnotationLastAppliedDrain] == uncordon
	})
	t.Logf("uncordon answered in %s", time.Since(began).Round(10*time.Millisecond))
}
