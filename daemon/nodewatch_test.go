package daemon

import (
	"testing"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/nodeward/nodeward/api/v1alpha1"
	"github.com/nodeward/nodeward/daemon/update"
	"github.com/nodeward/nodeward/test/cluster"
)

// TestReportedNodeIsReadBeforeTheWatchDeliversIt: after the agent's own
// cordon and the report of the step after it, the next step reads the
// node the report returned, cordon included, while the watch still holds
// the copy from before (a step reading that copy took the agent's own
// cordon for an admin's uncordon); a late, older copy from the watch does
// not replace it.
func TestReportedNodeIsReadBeforeTheWatchDeliversIt(t *testing.T) {
	t.Parallel()
	cp := env.ControlPlane(t)
	ctx := t.Context()
	name := cp.CreateNodes(t, cluster.NodeSpec{Prefix: "observe", Count: 1})[0]
	w := NewNodeWatch(cp.Kube(), name, nil) // not run: its events are the test's
	before, err := cp.Client().CoreV1().Nodes().Get(ctx, name, metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	w.Observe(before)

	patch := []byte(`{"spec":{"unschedulable":true}}`)
	if _, err := cp.Client().CoreV1().Nodes().Patch(ctx, name, "application/merge-patch+json", patch, metav1.PatchOptions{}); err != nil {
		t.Fatal(err)
	}
	p := &update.AnnotationProtocol{Client: cp.Kube(), Node: name, Observe: w.Observe}
	if err := p.Report(ctx, update.State{Step: v1alpha1.StepDraining, Target: "os-2"}); err != nil {
		t.Fatal(err)
	}
	check := func(when string) {
		t.Helper()
		got, err := w.Node(ctx)
		if err != nil {
			t.Fatal(err)
		}
		if !got.Spec.Unschedulable || got.Annotations[v1alpha1.AnnotationState] != string(v1alpha1.StepDraining) {
			t.Errorf("%s: the node read is resourceVersion %s, unschedulable %t, state %q; want the reported one, cordoned, in Draining",
				when, got.ResourceVersion, got.Spec.Unschedulable, got.Annotations[v1alpha1.AnnotationState])
		}
	}
	check("after the report")
	w.Observe(before)
	check("after the watch delivered the older copy")
}
