package main

import (
	"bytes"
	"os"
	"path/filepath"
	"strings"
	"testing"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

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
	client, ctx := cp.Client(), t.Context()
	f := newDrainFixture(t, cp, "cli", 0)
	node, ns := f.node, f.ns
	kube := "--kubeconfig=" + cp.KubeconfigPath()
	cordoned := func() bool { return f.cordoned(t, node) }

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

	f.setUnschedulable(t, node, true) // an administrator's cordon
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

// An admin who uncordons a node nodeward cordoned and cordons it again
// (kubectl uncordon, kubectl cordon: patches under the field manager
// "kubectl-cordon") owns that cordon, though nodeward's record survived:
// `nodeward uncordon` without --force leaves it and exits 2.
func TestUncordonLeavesAnAdminsRecordon(t *testing.T) {
	cp := env.ControlPlane(t)
	client, ctx := cp.Client(), t.Context()
	node := cp.CreateNodes(t, cluster.NodeSpec{Prefix: "cli-recordon", Count: 1})[0]
	kube := "--kubeconfig=" + cp.KubeconfigPath()
	if out, code := run(t, "drain", node, kube); code != 0 {
		t.Fatalf("nodeward's drain: exit %d, output:\n%s", code, out)
	}
	for _, patch := range []string{`{"spec":{"unschedulable":null}}`, `{"spec":{"unschedulable":true}}`} {
		if _, err := client.CoreV1().Nodes().Patch(ctx, node, "application/strategic-merge-patch+json", []byte(patch),
			metav1.PatchOptions{FieldManager: "kubectl-cordon"}); err != nil {
			t.Fatalf("admin patch %s: %v", patch, err)
		}
	}
	n, err := client.CoreV1().Nodes().Get(ctx, node, metav1.GetOptions{})
	if _, recorded := n.Annotations[v1alpha1.AnnotationCordonedBy]; err != nil || !recorded || !n.Spec.Unschedulable {
		t.Fatalf("setup: want the admin's cordon with nodeward's stale record: %v, %+v", err, n.ObjectMeta)
	}
	out, code := run(t, "uncordon", node, kube)
	if n, err = client.CoreV1().Nodes().Get(ctx, node, metav1.GetOptions{}); err != nil {
		t.Fatal(err)
	}
	if code != 2 || !strings.Contains(out, "cordoned by someone else") || !n.Spec.Unschedulable {
		t.Fatalf("uncordon of the admin's cordon: exit %d, unschedulable %t, output:\n%s", code, n.Spec.Unschedulable, out)
	}
}
