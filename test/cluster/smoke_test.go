package cluster_test

import (
	"context"
	"os"
	"testing"
	"time"

	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	policyv1 "k8s.io/api/policy/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/intstr"
	"k8s.io/utils/ptr"

	"github.com/nodeward/nodeward/test/cluster"
)

var env cluster.Env

func TestMain(m *testing.M) { os.Exit(env.Run(m)) }

// TestSmoke proves the stack is real: the scheduler spreads a Deployment over
// kwok nodes, the disruption controller computes PDB status so the API server
// refuses an eviction the budget forbids, and an allowed eviction really
// removes the pod and the ReplicaSet replaces it.
func TestSmoke(t *testing.T) {
	t.Parallel()
	cp := env.ControlPlane(t)
	ctx := context.Background()
	client := cp.Client()
	nodes := cp.CreateNodes(t, cluster.NodeSpec{Prefix: "smoke", Count: 3, Zones: []string{"a", "b", "c"}, Role: "worker"})
	ns := cp.Namespace(t)

	labels := map[string]string{"app": "smoke"}
	deploy := &appsv1.Deployment{
		ObjectMeta: metav1.ObjectMeta{Name: "smoke", Namespace: ns},
		Spec: appsv1.DeploymentSpec{
			Replicas: ptr.To[int32](3),
			Selector: &metav1.LabelSelector{MatchLabels: labels},
			Template: corev1.PodTemplateSpec{
				ObjectMeta: metav1.ObjectMeta{Labels: labels},
				Spec: corev1.PodSpec{
					NodeSelector:                  map[string]string{cluster.GroupLabel: "smoke"},
					TerminationGracePeriodSeconds: ptr.To[int64](1),
					TopologySpreadConstraints: []corev1.TopologySpreadConstraint{{
						MaxSkew: 1, TopologyKey: "kubernetes.io/hostname",
						WhenUnsatisfiable: corev1.DoNotSchedule,
						LabelSelector:     &metav1.LabelSelector{MatchLabels: labels},
					}},
					Containers: []corev1.Container{{Name: "app", Image: "registry.invalid/app:1"}},
				},
			},
		},
	}
	if _, err := client.AppsV1().Deployments(ns).Create(ctx, deploy, metav1.CreateOptions{}); err != nil {
		t.Fatalf("create deployment: %v", err)
	}
	running := waitRunningSpread(t, cp, ns, nodes)

	pdb := &policyv1.PodDisruptionBudget{
		ObjectMeta: metav1.ObjectMeta{Name: "smoke", Namespace: ns},
		Spec: policyv1.PodDisruptionBudgetSpec{
			MaxUnavailable: ptr.To(intstr.FromInt32(0)),
			Selector:       &metav1.LabelSelector{MatchLabels: labels},
		},
	}
	if _, err := client.PolicyV1().PodDisruptionBudgets(ns).Create(ctx, pdb, metav1.CreateOptions{}); err != nil {
		t.Fatalf("create PDB: %v", err)
	}
	waitPDB(t, cp, ns, 0)
	victim := running[0]
	err := client.CoreV1().Pods(ns).EvictV1(ctx, &policyv1.Eviction{ObjectMeta: metav1.ObjectMeta{Name: victim.Name, Namespace: ns}})
	if !apierrors.IsTooManyRequests(err) {
		t.Fatalf("eviction under a PDB with maxUnavailable 0: want 429 Too Many Requests, got %v", err)
	}

	current, err := client.PolicyV1().PodDisruptionBudgets(ns).Get(ctx, "smoke", metav1.GetOptions{})
	if err != nil {
		t.Fatalf("get PDB: %v", err)
	}
	current.Spec.MaxUnavailable = ptr.To(intstr.FromInt32(1))
	if _, err := client.PolicyV1().PodDisruptionBudgets(ns).Update(ctx, current, metav1.UpdateOptions{}); err != nil {
		t.Fatalf("update PDB: %v", err)
	}
	waitPDB(t, cp, ns, 1)
	if err := client.CoreV1().Pods(ns).EvictV1(ctx, &policyv1.Eviction{ObjectMeta: metav1.ObjectMeta{Name: victim.Name, Namespace: ns}}); err != nil {
		t.Fatalf("eviction allowed by the PDB: %v", err)
	}
	cluster.WaitFor(t, 30*time.Second, "evicted pod "+victim.Name+" to disappear", func(ctx context.Context) (bool, error) {
		_, err := client.CoreV1().Pods(ns).Get(ctx, victim.Name, metav1.GetOptions{})
		return apierrors.IsNotFound(err), nil
	})
	after := waitRunningSpread(t, cp, ns, nodes)
	for _, p := range after {
		if p.Name == victim.Name {
			t.Fatalf("evicted pod %s is still among the running pods", victim.Name)
		}
	}
}

// waitRunningSpread waits for exactly three Running pods, one on each node.
func waitRunningSpread(t *testing.T, cp *cluster.ControlPlane, ns string, nodes []string) []corev1.Pod {
	t.Helper()
	var running []corev1.Pod
	cluster.WaitFor(t, time.Minute, "3 Running pods spread over "+nodes[0]+".."+nodes[len(nodes)-1], func(ctx context.Context) (bool, error) {
		pods, err := cp.Client().CoreV1().Pods(ns).List(ctx, metav1.ListOptions{})
		if err != nil {
			return false, err
		}
		running = running[:0]
		onNode := map[string]bool{}
		for _, p := range pods.Items {
			if p.Status.Phase == corev1.PodRunning && p.DeletionTimestamp == nil {
				running = append(running, p)
				onNode[p.Spec.NodeName] = true
			}
		}
		for _, n := range nodes {
			if !onNode[n] {
				return false, nil
			}
		}
		return len(running) == 3, nil
	})
	return running
}

// waitPDB waits until the disruption controller has observed the PDB's
// current generation and allows exactly allowed disruptions.
func waitPDB(t *testing.T, cp *cluster.ControlPlane, ns string, allowed int32) {
	t.Helper()
	cluster.WaitFor(t, 30*time.Second, "PDB status", func(ctx context.Context) (bool, error) {
		pdb, err := cp.Client().PolicyV1().PodDisruptionBudgets(ns).Get(ctx, "smoke", metav1.GetOptions{})
		if err != nil {
			return false, err
		}
		return pdb.Status.ObservedGeneration == pdb.Generation && pdb.Status.DisruptionsAllowed == allowed &&
			pdb.Status.CurrentHealthy == 3, nil
	})
}
