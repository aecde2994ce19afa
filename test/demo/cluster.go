package main

import (
	"context"
	"fmt"
	"time"

	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	policyv1 "k8s.io/api/policy/v1"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/intstr"
	"k8s.io/apimachinery/pkg/util/wait"
	"k8s.io/utils/ptr"

	"github.com/nodeward/nodeward/test/cluster"
)

// createNodes creates count kwok nodes in two zones, labelled with group,
// and waits until they are Ready. (cluster.CreateNodes needs a testing.TB.)
func createNodes(ctx context.Context, cp *cluster.ControlPlane, group string, count int) ([]string, error) {
	capacity := corev1.ResourceList{
		corev1.ResourceCPU:    resource.MustParse("32"),
		corev1.ResourceMemory: resource.MustParse("256Gi"),
		corev1.ResourcePods:   resource.MustParse("250"),
	}
	zones := []string{"zone-a", "zone-b"}
	names := make([]string, count)
	for i := range count {
		names[i] = fmt.Sprintf("%s-%d", group, i)
		node := &corev1.Node{
			ObjectMeta: metav1.ObjectMeta{
				Name: names[i],
				Labels: map[string]string{
					"kubernetes.io/hostname": names[i], "kubernetes.io/os": "linux", "kubernetes.io/arch": "amd64",
					"type": "kwok", cluster.GroupLabel: group, cluster.ZoneLabel: zones[i%len(zones)],
					"node-role.kubernetes.io/worker": "",
				},
				Annotations: map[string]string{cluster.KwokAnnotation: "fake", "node.alpha.kubernetes.io/ttl": "0"},
			},
			Status: corev1.NodeStatus{Capacity: capacity, Allocatable: capacity},
		}
		if _, err := cp.Client().CoreV1().Nodes().Create(ctx, node, metav1.CreateOptions{}); err != nil {
			return nil, fmt.Errorf("create node %s: %w", names[i], err)
		}
	}
	err := wait.PollUntilContextTimeout(ctx, 200*time.Millisecond, time.Minute, true, func(ctx context.Context) (bool, error) {
		list, err := cp.Client().CoreV1().Nodes().List(ctx, metav1.ListOptions{LabelSelector: cluster.GroupLabel + "=" + group})
		if err != nil {
			return false, nil
		}
		ready := 0
		for i := range list.Items {
			if cluster.NodeReady(&list.Items[i]) {
				ready++
			}
		}
		return ready == count, nil
	})
	if err != nil {
		return nil, fmt.Errorf("wait for %d Ready nodes: %w", count, err)
	}
	return names, nil
}

// startWorkload runs pods (1 s termination grace) spread over the group's
// nodes under a PDB allowing three disruptions (so drains meet the PDB
// when two nodes drain at once), and waits until they run.
func startWorkload(ctx context.Context, cp *cluster.ControlPlane, group string, pods int) error {
	if pods == 0 {
		return nil
	}
	const ns, name = "default", "demo-web"
	labels := map[string]string{"app": name}
	d := &appsv1.Deployment{
		ObjectMeta: metav1.ObjectMeta{Name: name, Namespace: ns},
		Spec: appsv1.DeploymentSpec{
			Replicas: ptr.To(int32(pods)),
			Selector: &metav1.LabelSelector{MatchLabels: labels},
			Template: corev1.PodTemplateSpec{
				ObjectMeta: metav1.ObjectMeta{Labels: labels},
				Spec: corev1.PodSpec{
					NodeSelector:                  map[string]string{cluster.GroupLabel: group},
					TerminationGracePeriodSeconds: ptr.To[int64](1),
					Containers:                    []corev1.Container{{Name: "web", Image: "registry.invalid/web:1"}},
					TopologySpreadConstraints: []corev1.TopologySpreadConstraint{{
						MaxSkew: 1, TopologyKey: "kubernetes.io/hostname", WhenUnsatisfiable: corev1.ScheduleAnyway,
						LabelSelector: &metav1.LabelSelector{MatchLabels: labels},
					}},
				},
			},
		},
	}
	if _, err := cp.Client().AppsV1().Deployments(ns).Create(ctx, d, metav1.CreateOptions{}); err != nil {
		return fmt.Errorf("create deployment: %w", err)
	}
	pdb := &policyv1.PodDisruptionBudget{
		ObjectMeta: metav1.ObjectMeta{Name: name, Namespace: ns},
		Spec: policyv1.PodDisruptionBudgetSpec{
			MaxUnavailable: ptr.To(intstr.FromInt32(3)),
			Selector:       &metav1.LabelSelector{MatchLabels: labels},
		},
	}
	if _, err := cp.Client().PolicyV1().PodDisruptionBudgets(ns).Create(ctx, pdb, metav1.CreateOptions{}); err != nil {
		return fmt.Errorf("create PDB: %w", err)
	}
	err := wait.PollUntilContextTimeout(ctx, 200*time.Millisecond, 2*time.Minute, true, func(ctx context.Context) (bool, error) {
		got, err := cp.Client().AppsV1().Deployments(ns).Get(ctx, name, metav1.GetOptions{})
		return err == nil && got.Status.AvailableReplicas == int32(pods), nil
	})
	if err != nil {
		return fmt.Errorf("wait for %d running pods: %w", pods, err)
	}
	return nil
}
