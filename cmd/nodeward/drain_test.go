package main

import (
	"bytes"
	"context"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	policyv1 "k8s.io/api/policy/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/intstr"
	"k8s.io/utils/ptr"

	"github.com/nodeward/nodeward/api/v1alpha1"
	"github.com/nodeward/nodeward/test/cluster"
)

var env cluster.Env

func TestMain(m *testing.M) { os.Exit(env.Run(m)) }

// run executes the CLI in-process and returns its output and exit code.
func run(t *testing.T, args ...string) (string, int) {
	t.Helper()
	var out bytes.Buffer
	cmd := newRootCommand()
	cmd.SetOut(&out)
	cmd.SetErr(&out)
	cmd.SetArgs(args)
	err := cmd.ExecuteContext(t.Context())
	if err != nil {
		out.WriteString("error: " + err.Error() + "\n")
		return out.String(), rootExitCode(cmd, err)
	}
	return out.String(), 0
}

// The drain command end to end: a dry run changes nothing, a PDB-blocked
// drain under yield exits 2 naming the PDB and uncordons, a rules file
// orders a successful drain, and uncordon leaves an admin's cordon alone.
func TestDrainCommand(t *testing.T) {
	cp := env.ControlPlane(t)
	client := cp.Client()
	ctx := t.Context()
	nodes := cp.CreateNodes(t, cluster.NodeSpec{Prefix: "cli", Count: 2})
	node, free := nodes[0], nodes[1]
	ns := cp.Namespace(t)
	kube := "--kubeconfig=" + cp.KubeconfigPath()
	setUnschedulable := func(name string, on bool) {
		patch := fmt.Sprintf(`{"spec":{"unschedulable":%t}}`, on)
		if _, err := client.CoreV1().Nodes().Patch(ctx, name, "application/merge-patch+json", []byte(patch), metav1.PatchOptions{}); err != nil {
			t.Fatal(err)
		}
	}
	setUnschedulable(free, true)
	labels := map[string]string{"app": "web"}
	_, err := client.AppsV1().Deployments(ns).Create(ctx, &appsv1.Deployment{
		ObjectMeta: metav1.ObjectMeta{Name: "web"},
		Spec: appsv1.DeploymentSpec{
			Replicas: ptr.To[int32](2),
			Selector: &metav1.LabelSelector{MatchLabels: labels},
			Template: corev1.PodTemplateSpec{
				ObjectMeta: metav1.ObjectMeta{Labels: labels},
				Spec: corev1.PodSpec{
					NodeSelector:                  map[string]string{cluster.GroupLabel: "cli"},
					TerminationGracePeriodSeconds: ptr.To[int64](1),
					Containers:                    []corev1.Container{{Name: "c", Image: "registry.invalid/web:1"}},
				},
			},
		},
	}, metav1.CreateOptions{})
	if err != nil {
		t.Fatal(err)
	}
	_, err = client.PolicyV1().PodDisruptionBudgets(ns).Create(ctx, &policyv1.PodDisruptionBudget{
		ObjectMeta: metav1.ObjectMeta{Name: "web-pdb"},
		Spec: policyv1.PodDisruptionBudgetSpec{
			MaxUnavailable: ptr.To(intstr.FromInt32(0)),
			Selector:       &metav1.LabelSelector{MatchLabels: labels},
		},
	}, metav1.CreateOptions{})
	if err != nil {
		t.Fatal(err)
	}
	cluster.WaitFor(t, 60*time.Second, "web pods running and PDB computed", func(ctx context.Context) (bool, error) {
		pdb, err := client.PolicyV1().PodDisruptionBudgets(ns).Get(ctx, "web-pdb", metav1.GetOptions{})
		return err == nil && pdb.Status.CurrentHealthy == 2 && pdb.Status.ObservedGeneration == pdb.Generation, err
	})
	setUnschedulable(free, false)
	cordoned := func() bool {
		n, err := client.CoreV1().Nodes().Get(ctx, node, metav1.GetOptions{})
		if err != nil {
			t.Fatal(err)
		}
		return n.Spec.Unschedulable
	}

	out, code := run(t, "drain", node, kube, "--dry-run")
	if code != 0 || !strings.Contains(out, "Plan for node "+node+": 2 pods in 1 batches") || cordoned() {
		t.Fatalf("dry run: exit %d, cordoned %t, output:\n%s", code, cordoned(), out)
	}

	out, code = run(t, "drain", node, kube, "--timeout=2s", "--on-timeout=yield")
	if code != exitDrainBlocked || !strings.Contains(out, "BLOCKED") || !strings.Contains(out, "PDB "+ns+"/web-pdb allows 0 disruptions") {
		t.Fatalf("blocked drain: exit %d, output:\n%s", code, out)
	}
	if cordoned() {
		t.Fatal("node left cordoned after a yielded drain")
	}

	out, code = run(t, "drain", node, kube, "--on-timeout=later")
	if code != exitUsage || !strings.Contains(out, `--on-timeout: on-timeout "later"`) || cordoned() {
		t.Fatalf("bad flag: exit %d, output:\n%s", code, out)
	}
	rules := filepath.Join(t.TempDir(), "rules.yaml")
	if err := os.WriteFile(rules, []byte("kind: DrainRules\nrules:\n- name: web\n  podSelector: {matchLabels: {app: web}}\n  order: 7\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	if _, err := client.PolicyV1().PodDisruptionBudgets(ns).Patch(ctx, "web-pdb", "application/merge-patch+json",
		[]byte(`{"spec":{"maxUnavailable":1}}`), metav1.PatchOptions{}); err != nil {
		t.Fatal(err)
	}
	out, code = run(t, "drain", node, kube, "--rules="+rules)
	if code != 0 || !strings.Contains(out, "batch 1 (order 7): 2 pods") || !strings.Contains(out, "[rule web]") ||
		!strings.Contains(out, "Node "+node+" drained") || !cordoned() {
		t.Fatalf("ordered drain: exit %d, cordoned %t, output:\n%s", code, cordoned(), out)
	}
	if out, code = run(t, "uncordon", node, kube); code != 0 || cordoned() {
		t.Fatalf("uncordon of nodeward's cordon: exit %d, output:\n%s", code, out)
	}

	setUnschedulable(node, true) // an administrator's cordon
	out, code = run(t, "uncordon", node, kube)
	if code != 2 || !strings.Contains(out, "cordoned by someone else") || !cordoned() {
		t.Fatalf("uncordon of an admin cordon: exit %d, output:\n%s", code, out)
	}
	n, _ := client.CoreV1().Nodes().Get(ctx, node, metav1.GetOptions{})
	if _, ok := n.Annotations[v1alpha1.AnnotationCordonedBy]; ok {
		t.Fatal("the admin's cordon was recorded as nodeward's")
	}
	if out, code = run(t, "uncordon", node, kube, "--force"); code != 0 || cordoned() {
		t.Fatalf("forced uncordon: exit %d, output:\n%s", code, out)
	}
}
