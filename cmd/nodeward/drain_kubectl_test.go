package main

import (
	"context"
	"fmt"
	"strings"
	"testing"
	"time"

	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	policyv1 "k8s.io/api/policy/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/intstr"
	"k8s.io/utils/ptr"

	"github.com/nodeward/nodeward/test/cluster"
)

// drainFixture is two nodes of a group: node holds a two-pod Deployment
// "web" behind the PDB "web-pdb", free takes the pods that leave it.
type drainFixture struct {
	cp         *cluster.ControlPlane
	ns         string
	node, free string
}

func newDrainFixture(t *testing.T, cp *cluster.ControlPlane, group string, maxUnavailable int32) drainFixture {
	t.Helper()
	client, ctx := cp.Client(), t.Context()
	nodes := cp.CreateNodes(t, cluster.NodeSpec{Prefix: group, Count: 2})
	f := drainFixture{cp: cp, ns: cp.Namespace(t), node: nodes[0], free: nodes[1]}
	f.setUnschedulable(t, f.free, true)
	labels := map[string]string{"app": "web"}
	_, err := client.AppsV1().Deployments(f.ns).Create(ctx, &appsv1.Deployment{
		ObjectMeta: metav1.ObjectMeta{Name: "web"},
		Spec: appsv1.DeploymentSpec{
			Replicas: ptr.To[int32](2),
			Selector: &metav1.LabelSelector{MatchLabels: labels},
			Template: corev1.PodTemplateSpec{
				ObjectMeta: metav1.ObjectMeta{Labels: labels},
				Spec: corev1.PodSpec{
					NodeSelector:                  map[string]string{cluster.GroupLabel: group},
					TerminationGracePeriodSeconds: ptr.To[int64](1),
					Containers:                    []corev1.Container{{Name: "c", Image: "registry.invalid/web:1"}},
				},
			},
		},
	}, metav1.CreateOptions{})
	if err != nil {
		t.Fatal(err)
	}
	_, err = client.PolicyV1().PodDisruptionBudgets(f.ns).Create(ctx, &policyv1.PodDisruptionBudget{
		ObjectMeta: metav1.ObjectMeta{Name: "web-pdb"},
		Spec: policyv1.PodDisruptionBudgetSpec{
			MaxUnavailable: ptr.To(intstr.FromInt32(maxUnavailable)),
			Selector:       &metav1.LabelSelector{MatchLabels: labels},
		},
	}, metav1.CreateOptions{})
	if err != nil {
		t.Fatal(err)
	}
	cluster.WaitFor(t, 60*time.Second, "web pods running and PDB computed", func(ctx context.Context) (bool, error) {
		pdb, err := client.PolicyV1().PodDisruptionBudgets(f.ns).Get(ctx, "web-pdb", metav1.GetOptions{})
		return err == nil && pdb.Status.CurrentHealthy == 2 && pdb.Status.ObservedGeneration == pdb.Generation, err
	})
	f.setUnschedulable(t, f.free, false)
	return f
}

func (f drainFixture) setUnschedulable(t *testing.T, name string, on bool) {
	t.Helper()
	patch := fmt.Sprintf(`{"spec":{"unschedulable":%t}}`, on)
	if _, err := f.cp.Client().CoreV1().Nodes().Patch(t.Context(), name, "application/merge-patch+json", []byte(patch), metav1.PatchOptions{}); err != nil {
		t.Fatal(err)
	}
}

func (f drainFixture) cordoned(t *testing.T, name string) bool {
	t.Helper()
	n, err := f.cp.Client().CoreV1().Nodes().Get(t.Context(), name, metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	return n.Spec.Unschedulable
}

// podsOn lists the names of the pods on node.
func (f drainFixture) podsOn(t *testing.T, node string) []string {
	t.Helper()
	list, err := f.cp.Client().CoreV1().Pods(f.ns).List(t.Context(), metav1.ListOptions{FieldSelector: "spec.nodeName=" + node})
	if err != nil {
		t.Fatal(err)
	}
	var names []string
	for _, p := range list.Items {
		names = append(names, p.Name)
	}
	return names
}

// TestDrainKubectlFlags: kubectl drain's habits. --timeout ends a
// PDB-blocked drain with exit 2 naming the PDB and leaves the node
// cordoned; --dry-run=client and =server change nothing; --disable-eviction
// deletes past the PDB; -l drains every selected node.
func TestDrainKubectlFlags(t *testing.T) {
	cp := env.ControlPlane(t)
	f := newDrainFixture(t, cp, "kc", 0)
	kube := "--kubeconfig=" + cp.KubeconfigPath()

	start := time.Now()
	out, code := run(t, "drain", f.node, kube, "--timeout=3s", "--ignore-daemonsets", "--delete-emptydir-data")
	elapsed := time.Since(start)
	if code != exitDrainBlocked || elapsed > 20*time.Second || !strings.Contains(out, "PDB "+f.ns+"/web-pdb allows 0 disruptions") ||
		!strings.Contains(out, "blocking:") {
		t.Fatalf("PDB-blocked drain with --timeout=3s: exit %d after %s, output:\n%s", code, elapsed, out)
	}
	if elapsed < 3*time.Second {
		t.Fatalf("the drain gave up after %s, before its 3s timeout", elapsed)
	}
	if !f.cordoned(t, f.node) {
		t.Fatal("a timed-out drain uncordoned the node; kubectl leaves it cordoned")
	}
	if out, code = run(t, "uncordon", f.node, kube); code != 0 {
		t.Fatalf("uncordon: exit %d:\n%s", code, out)
	}

	before := f.podsOn(t, f.node)
	for _, mode := range []string{"--dry-run=client", "--dry-run=server"} {
		out, code = run(t, "drain", f.node, kube, mode)
		if code != 0 || !strings.Contains(out, "Plan for node "+f.node+": 2 pods") || f.cordoned(t, f.node) ||
			len(f.podsOn(t, f.node)) != len(before) {
			t.Fatalf("drain %s changed something: exit %d, cordoned %t, output:\n%s", mode, code, f.cordoned(t, f.node), out)
		}
	}
	if !strings.Contains(out, "NOT now") || !strings.Contains(out, "disruption budget") {
		t.Errorf("--dry-run=server does not say the PDB refuses the evictions:\n%s", out)
	}

	out, code = run(t, "drain", f.node, kube, "--disable-eviction", "--timeout=30s")
	if code != 0 || !strings.Contains(out, "Node "+f.node+" drained") || !strings.Contains(out, "2 force-deleted") {
		t.Fatalf("--disable-eviction past a PDB: exit %d, output:\n%s", code, out)
	}
	cluster.WaitFor(t, 30*time.Second, "no pod left on the drained node", func(context.Context) (bool, error) {
		return len(f.podsOn(t, f.node)) == 0, nil
	})

	group := cp.CreateNodes(t, cluster.NodeSpec{Prefix: "kcl", Count: 2})
	out, code = run(t, "drain", "-l", cluster.GroupLabel+"=kcl", kube)
	for _, n := range group {
		if code != 0 || !strings.Contains(out, "Node "+n+" drained") || !f.cordoned(t, n) {
			t.Fatalf("drain -l: exit %d, node %s cordoned %t, output:\n%s", code, n, f.cordoned(t, n), out)
		}
	}
	if out, code = run(t, "drain", group[0], "-l", cluster.GroupLabel+"=kcl", kube); code != exitUsage {
		t.Fatalf("drain NODE -l: exit %d, want %d:\n%s", code, exitUsage, out)
	}
}
