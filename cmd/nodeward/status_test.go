package main

import (
	"bytes"
	"context"
	"encoding/json"
	"strings"
	"sync"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/dynamic"
	"sigs.k8s.io/yaml"

	"github.com/nodeward/nodeward/api/v1alpha1"
	"github.com/nodeward/nodeward/test/cluster"
)

func TestStatusTablesReadLikeOcGetMcp(t *testing.T) {
	var out bytes.Buffer
	pool := v1alpha1.UpdatePool{ObjectMeta: metav1.ObjectMeta{Name: "worker"}, Status: v1alpha1.UpdatePoolStatus{
		ConfigName: "nodeward-abc", MachineCount: 3, ReadyMachineCount: 2, UpdatedMachineCount: 1,
		Conditions: []metav1.Condition{{Type: v1alpha1.PoolUpdating, Status: metav1.ConditionTrue},
			{Type: v1alpha1.PoolHalted, Status: metav1.ConditionTrue, Message: "failure budget of 1 exhausted: w9 failed on the target"},
			{Type: v1alpha1.PoolGatesPassing, Status: metav1.ConditionFalse, Reason: "AlertFiring", Message: "alert KubeAPIErrorsHigh firing"},
			{Type: v1alpha1.PoolSilenced, Status: metav1.ConditionFalse, Reason: "SilenceFailed", Message: "Alertmanager http://am:9093 refused"}},
	}}
	now := time.Date(2026, 11, 22, 12, 0, 0, 0, time.UTC)
	r, err := buildReport([]v1alpha1.UpdatePool{pool}, []corev1.Node{{
		ObjectMeta: metav1.ObjectMeta{Name: "w1", Annotations: map[string]string{
			v1alpha1.AnnotationState: "Draining", v1alpha1.AnnotationGrant: "g1",
			v1alpha1.AnnotationUnavailableSince: now.Add(-90 * time.Second).Format(time.RFC3339Nano),
			v1alpha1.AnnotationReason:           "pod a/b blocked by PDB a/pdb",
		}},
		Spec: corev1.NodeSpec{Unschedulable: true},
	}})
	if err != nil {
		t.Fatal(err)
	}
	if err := printStatus(&out, r, "", now); err != nil {
		t.Fatal(err)
	}
	got := out.String()
	for _, want := range []string{"MACHINECOUNT", "READYMACHINECOUNT", "UPDATEDMACHINECOUNT", "worker", "nodeward-abc",
		"Unknown", "True", "w1", "Draining", "1m30s", "blocked by PDB a/pdb", "HALTED: failure budget of 1 exhausted: w9",
		"GATES: AlertFiring: alert KubeAPIErrorsHigh firing", "SILENCES: Alertmanager http://am:9093 refused"} {
		if !strings.Contains(got, want) {
			t.Errorf("status output lacks %q:\n%s", want, got)
		}
	}
	out.Reset()
	if err := printStatus(&out, r, "json", now); err != nil {
		t.Fatal(err)
	}
	for _, want := range []string{`"gatesFailing":"AlertFiring: alert KubeAPIErrorsHigh firing"`, `"silenceError":"Alertmanager http://am:9093 refused"`} {
		if !strings.Contains(out.String(), want) {
			t.Errorf("status -o json lacks %s:\n%s", want, out.String())
		}
	}
}

// statusFixture installs the UpdatePool API, creates a pool selecting two
// fresh nodes, one Draining under a grant in zone-a and one Idle, and
// sets the pool's status as a coordinator would.
func statusFixture(t *testing.T, prefix string) (cp *cluster.ControlPlane, pool string, nodes []string) {
	t.Helper()
	cp = env.ControlPlane(t)
	ctx := t.Context()
	dyn, err := dynamic.NewForConfig(cp.Config())
	if err != nil {
		t.Fatal(err)
	}
	if err := cp.InstallCRDs(ctx); err != nil {
		t.Fatal(err)
	}
	nodes = cp.CreateNodes(t, cluster.NodeSpec{Prefix: prefix, Count: 2, Zones: []string{"zone-a", "zone-b"}})
	patchNode(t, cp, nodes[0], map[string]string{v1alpha1.AnnotationState: "Draining", v1alpha1.AnnotationGrant: "g-7",
		v1alpha1.AnnotationTarget: "quay/os@sha256:new", v1alpha1.AnnotationStaged: "quay/os@sha256:new",
		v1alpha1.AnnotationReason: "pod a/b blocked by PDB a/pdb"})
	patchNode(t, cp, nodes[1], map[string]string{v1alpha1.AnnotationState: "Idle"})

	pool = prefix + "-pool"
	p := v1alpha1.UpdatePool{TypeMeta: metav1.TypeMeta{APIVersion: v1alpha1.UpdatePoolResource().GroupVersion().String(), Kind: "UpdatePool"},
		ObjectMeta: metav1.ObjectMeta{Name: pool},
		Spec:       v1alpha1.UpdatePoolSpec{NodeSelector: &metav1.LabelSelector{MatchLabels: map[string]string{cluster.GroupLabel: prefix}}}}
	obj, err := runtime.DefaultUnstructuredConverter.ToUnstructured(&p)
	if err != nil {
		t.Fatal(err)
	}
	res := dyn.Resource(v1alpha1.UpdatePoolResource())
	created, err := res.Create(ctx, &unstructured.Unstructured{Object: obj}, metav1.CreateOptions{})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = res.Delete(context.Background(), pool, metav1.DeleteOptions{}) })
	_ = unstructured.SetNestedMap(created.Object, map[string]any{"configName": "nodeward-abc", "machineCount": int64(2),
		"readyMachineCount": int64(1), "updatedMachineCount": int64(1), "unavailableMachineCount": int64(1),
		"degradedMachineCount": int64(0)}, "status")
	if _, err := res.UpdateStatus(ctx, created, metav1.UpdateOptions{}); err != nil {
		t.Fatal(err)
	}
	return cp, pool, nodes
}

func patchNode(t *testing.T, cp *cluster.ControlPlane, node string, ann map[string]string) {
	t.Helper()
	patch, err := json.Marshal(map[string]any{"metadata": map[string]any{"annotations": ann}})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := cp.Client().CoreV1().Nodes().Patch(t.Context(), node, types.MergePatchType, patch, metav1.PatchOptions{}); err != nil {
		t.Fatalf("annotate node %s: %v", node, err)
	}
}

// TestStatusOutputFormats: -o json and -o yaml parse back into the
// documented structure with the pool's status and each node's step,
// target, grant and reason; -o wide adds the grant, staged and zone
// columns; a bad -o is a usage error.
func TestStatusOutputFormats(t *testing.T) {
	cp, pool, nodes := statusFixture(t, "stfmt")
	kube := "--kubeconfig=" + cp.KubeconfigPath()
	check := func(format string, r statusReport) {
		t.Helper()
		if len(r.Pools) != 1 {
			t.Fatalf("-o %s: %d pools, want 1: %+v", format, len(r.Pools), r)
		}
		p := r.Pools[0]
		if p.Name != pool || p.Config != "nodeward-abc" || p.MachineCount != 2 || p.UnavailableMachineCount != 1 ||
			p.Updated != "Unknown" || len(p.Nodes) != 2 {
			t.Fatalf("-o %s: pool %+v", format, p)
		}
		n0, n1 := p.Nodes[0], p.Nodes[1]
		if n0.Name != nodes[0] || n0.Step != "Draining" || n0.Grant != "g-7" || n0.Target != "quay/os@sha256:new" ||
			n0.Staged != "quay/os@sha256:new" || n0.Reason != "pod a/b blocked by PDB a/pdb" || n0.Zone != "zone-a" || !n0.Schedulable {
			t.Errorf("-o %s: node 0 %+v", format, n0)
		}
		if n1.Name != nodes[1] || n1.Step != "Idle" || n1.Grant != "" || n1.Zone != "zone-b" {
			t.Errorf("-o %s: node 1 %+v", format, n1)
		}
	}

	out, code := run(t, "status", pool, "-o", "json", kube)
	if code != 0 {
		t.Fatalf("-o json: exit %d:\n%s", code, out)
	}
	var r statusReport
	if err := json.Unmarshal([]byte(out), &r); err != nil {
		t.Fatalf("-o json does not parse: %v\n%s", err, out)
	}
	check("json", r)

	out, code = run(t, "status", pool, "-o", "yaml", kube)
	if code != 0 {
		t.Fatalf("-o yaml: exit %d:\n%s", code, out)
	}
	r = statusReport{}
	if err := yaml.UnmarshalStrict([]byte(strings.TrimPrefix(out, "---\n")), &r); err != nil {
		t.Fatalf("-o yaml does not parse: %v\n%s", err, out)
	}
	check("yaml", r)

	out, code = run(t, "status", pool, "-o", "wide", kube)
	if code != 0 {
		t.Fatalf("-o wide: exit %d:\n%s", code, out)
	}
	for _, want := range []string{"GRANT", "TARGET", "STAGED", "ZONE", "PAUSED", "g-7", "quay/os@sha256:new", "zone-a", "zone-b", "Draining", "blocked by PDB"} {
		if !strings.Contains(out, want) {
			t.Errorf("-o wide lacks %q:\n%s", want, out)
		}
	}
	out, code = run(t, "status", pool, kube)
	if code != 0 || strings.Contains(out, "ZONE") || !strings.Contains(out, "Draining") {
		t.Errorf("default table: exit %d:\n%s", code, out)
	}
	if out, code = run(t, "status", "-o", "xml", kube); code != exitUsage {
		t.Errorf("-o xml: exit %d, want %d:\n%s", code, exitUsage, out)
	}
}

// syncBuffer is a bytes.Buffer safe for a writer and a reader in two
// goroutines.
type syncBuffer struct {
	mu  sync.Mutex
	buf bytes.Buffer
}

func (b *syncBuffer) Write(p []byte) (int, error) {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.buf.Write(p)
}

func (b *syncBuffer) String() string {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.buf.String()
}

// TestStatusWatchPrintsAgainOnChange: status --watch -o json prints the
// pool, prints again after a node's annotation changes, and returns
// without error when its context is cancelled.
func TestStatusWatchPrintsAgainOnChange(t *testing.T) {
	cp, pool, nodes := statusFixture(t, "stwatch")
	for _, format := range []string{"json", ""} {
		ctx, cancel := context.WithCancel(t.Context())
		var out syncBuffer
		cmd := newRootCommand()
		cmd.SetOut(&out)
		cmd.SetErr(&out)
		args := []string{"status", pool, "--watch", "--kubeconfig=" + cp.KubeconfigPath()}
		if format != "" {
			args = append(args, "-o", format)
		}
		cmd.SetArgs(args)
		done := make(chan error, 1)
		go func() { done <- cmd.ExecuteContext(ctx) }()

		cluster.WaitFor(t, 20*time.Second, "the first print", func(context.Context) (bool, error) {
			return strings.Contains(out.String(), "Draining"), nil
		})
		state := "Rebooting-" + format
		patchNode(t, cp, nodes[0], map[string]string{v1alpha1.AnnotationState: state})
		cluster.WaitFor(t, 20*time.Second, "a second print after the node's step changed", func(context.Context) (bool, error) {
			return strings.Contains(out.String(), state), nil
		})
		cancel()
		select {
		case err := <-done:
			if err != nil {
				t.Fatalf("-o %q --watch ended with %v:\n%s", format, err, out.String())
			}
		case <-time.After(10 * time.Second):
			t.Fatalf("-o %q --watch did not end after its context was cancelled", format)
		}
		got := out.String()
		if format == "json" {
			dec := json.NewDecoder(strings.NewReader(got))
			var docs []statusReport
			for dec.More() {
				var r statusReport
				if err := dec.Decode(&r); err != nil {
					t.Fatalf("watch output does not parse as JSON documents: %v\n%s", err, got)
				}
				docs = append(docs, r)
			}
			if len(docs) < 2 || docs[0].Pools[0].Nodes[0].Step != "Draining" || docs[len(docs)-1].Pools[0].Nodes[0].Step != state {
				t.Fatalf("watch documents %+v", docs)
			}
		} else if strings.Count(got, "\nPOOL "+pool+"\n") < 2 {
			t.Fatalf("table watch printed the table fewer than twice:\n%s", got)
		}
		patchNode(t, cp, nodes[0], map[string]string{v1alpha1.AnnotationState: "Draining"})
	}
}

// A drain waiting on a PDB shows its blockers at once, from the Drained
// condition the drain publishes, before the agent's own reason (written
// when the drain attempt ends) says it.
func TestStatusShowsDrainBlockersBeforeTheAttemptEnds(t *testing.T) {
	n := corev1.Node{ObjectMeta: metav1.ObjectMeta{Name: "n", Annotations: map[string]string{
		v1alpha1.AnnotationState: string(v1alpha1.StepDraining)}}}
	n.Status.Conditions = []corev1.NodeCondition{{Type: v1alpha1.ConditionDrained, Status: corev1.ConditionFalse,
		Reason: "DrainBlocked", Message: "1 pod blocks the drain: pod a/b: eviction refused: PDB a/pdb allows 0 disruptions"}}
	if got := nodeRow(n).Reason; !strings.Contains(got, "PDB a/pdb allows 0 disruptions") {
		t.Errorf("reason of a drain blocked by a PDB = %q, want the Drained condition's blockers", got)
	}
	n.Annotations[v1alpha1.AnnotationReason] = "drain: the agent's own words"
	if got := nodeRow(n).Reason; got != "drain: the agent's own words" {
		t.Errorf("reason = %q, want the agent's reason once it has one", got)
	}
	n.Annotations = map[string]string{v1alpha1.AnnotationState: string(v1alpha1.StepStaged)}
	if got := nodeRow(n).Reason; got != "" {
		t.Errorf("reason of a Staged node = %q, want none: the Drained condition is an old drain's", got)
	}
}
