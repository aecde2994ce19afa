package main

import (
	"encoding/json"
	"strings"
	"testing"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/dynamic"

	"github.com/nodeward/nodeward/api/v1alpha1"
)

// TestPauseAndResume: pause sets spec.paused and the reason, status shows
// it, resume clears both; a missing reason is a usage error and a missing
// pool an error naming it, neither changing anything; the CRD refuses a
// reason without paused.
func TestPauseAndResume(t *testing.T) {
	cp, pool, _ := statusFixture(t, "andon")
	kube := "--kubeconfig=" + cp.KubeconfigPath()
	dyn, err := dynamic.NewForConfig(cp.Config())
	if err != nil {
		t.Fatal(err)
	}
	spec := func() v1alpha1.UpdatePoolSpec {
		obj, err := dyn.Resource(v1alpha1.UpdatePoolResource()).Get(t.Context(), pool, metav1.GetOptions{})
		if err != nil {
			t.Fatal(err)
		}
		var p v1alpha1.UpdatePool
		data, _ := obj.MarshalJSON()
		if err := json.Unmarshal(data, &p); err != nil {
			t.Fatal(err)
		}
		return p.Spec
	}

	if out, code := run(t, "pause", pool, kube); code != exitUsage || !strings.Contains(out, "--reason is required") || spec().Paused {
		t.Fatalf("pause without --reason: exit %d, paused %v:\n%s", code, spec().Paused, out)
	}
	if out, code := run(t, "pause", "no-such-pool", "--reason", "x", kube); code != 1 || !strings.Contains(out, `UpdatePool "no-such-pool" not found`) {
		t.Fatalf("pause of a missing pool: exit %d:\n%s", code, out)
	}
	reason := "INC-4711: checkout errors since the 10:02 wave"
	if out, code := run(t, "pause", pool, "--reason", reason, kube); code != 0 || !strings.Contains(out, "paused: "+reason) {
		t.Fatalf("pause: exit %d:\n%s", code, out)
	}
	if s := spec(); !s.Paused || s.PauseReason != reason {
		t.Fatalf("after pause: paused %v, reason %q", s.Paused, s.PauseReason)
	}
	if out, code := run(t, "status", pool, kube); code != 0 || !strings.Contains(out, "PAUSED: "+reason) {
		t.Fatalf("status of the paused pool: exit %d:\n%s", code, out)
	}
	if out, code := run(t, "status", pool, "-o", "json", kube); code != 0 || !strings.Contains(out, `"pauseReason":"`+reason+`"`) {
		t.Fatalf("status -o json of the paused pool: exit %d:\n%s", code, out)
	}
	// A failure on the target, as the coordinator lists it: resume
	// acknowledges it for the failure budget.
	res := dyn.Resource(v1alpha1.UpdatePoolResource())
	obj, err := res.Get(t.Context(), pool, metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	_ = unstructured.SetNestedStringSlice(obj.Object, []string{"andon-0"}, "status", "failedNodes")
	if _, err := res.UpdateStatus(t.Context(), obj, metav1.UpdateOptions{}); err != nil {
		t.Fatal(err)
	}
	if out, code := run(t, "resume", pool, kube); code != 0 || !strings.Contains(out, "resumed") || !strings.Contains(out, "acknowledged failures on the current target: andon-0") {
		t.Fatalf("resume: exit %d:\n%s", code, out)
	}
	if s := spec(); s.Paused || s.PauseReason != "" {
		t.Fatalf("after resume: paused %v, reason %q", s.Paused, s.PauseReason)
	}
	obj, err = res.Get(t.Context(), pool, metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	if got := obj.GetAnnotations()[v1alpha1.AnnotationFailuresAcknowledged]; got != "nodeward-abc:andon-0" {
		t.Fatalf("acknowledgement %q, want nodeward-abc:andon-0", got)
	}
	// A halt by a gate that failed during a soak, as the coordinator
	// writes it: resume removes it and says so.
	halt := map[string]any{"metadata": map[string]any{"annotations": map[string]any{
		v1alpha1.AnnotationHalted: "nodeward-abc:gate failed while andon-1 soaked: AlertFiring: alert X firing"}}}
	data, _ := json.Marshal(halt)
	if _, err := res.Patch(t.Context(), pool, types.MergePatchType, data, metav1.PatchOptions{}); err != nil {
		t.Fatal(err)
	}
	if out, code := run(t, "resume", pool, kube); code != 0 || !strings.Contains(out, "cleared the halt: gate failed while andon-1 soaked") {
		t.Fatalf("resume of a halted pool: exit %d:\n%s", code, out)
	}
	if obj, err = res.Get(t.Context(), pool, metav1.GetOptions{}); err != nil {
		t.Fatal(err)
	}
	if got, ok := obj.GetAnnotations()[v1alpha1.AnnotationHalted]; ok {
		t.Fatalf("the halt %q survived resume", got)
	}
	// The API refuses a reason on a running pool, naming the field.
	_, err = dyn.Resource(v1alpha1.UpdatePoolResource()).Patch(t.Context(), pool, types.MergePatchType,
		[]byte(`{"spec":{"pauseReason":"why"}}`), metav1.PatchOptions{})
	if err == nil || !strings.Contains(err.Error(), "spec.pauseReason is set only while spec.paused is true") {
		t.Fatalf("a pauseReason without paused was accepted or refused unclearly: %v", err)
	}
}
