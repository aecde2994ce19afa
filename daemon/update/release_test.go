package update

import (
	"context"
	"strings"
	"testing"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	v1alpha1 "github.com/nodeward/nodeward/api/v1alpha1"
)

// TestDoneReportReleasesAMarkedGrant: a grant the coordinator marked
// release-at-done is given back by the report of Done, and only by it; an
// unmarked grant stays for the coordinator to release.
func TestDoneReportReleasesAMarkedGrant(t *testing.T) {
	t.Parallel()
	for _, marked := range []bool{true, false} {
		w := newWorld(t, "os-1")
		dir := t.TempDir()
		m := w.machine(dir)
		w.set(func(w *world) {
			w.desired = Desired{Target: "os-2", Grant: "g1", GrantTarget: "os-2", ReleaseAtDone: marked}
		})
		if got := settle(t, m); got != v1alpha1.StepRebooting {
			t.Fatalf("marked=%v: after the grant: step %s, want Rebooting", marked, got)
		}
		if released(ReportAnnotations(m.State())) {
			t.Fatalf("marked=%v: the report at Rebooting gives the grant back", marked)
		}
		w.boot(false)
		m = w.machine(dir)
		if got := settle(t, m); got != v1alpha1.StepDone {
			t.Fatalf("marked=%v: after the boot: step %s, want Done", marked, got)
		}
		report := ReportAnnotations(m.State())
		if g := report[v1alpha1.AnnotationStateGrant]; g == nil || *g != "g1" {
			t.Fatalf("marked=%v: Done report names grant %v, want g1", marked, g)
		}
		if released(report) != marked {
			t.Fatalf("marked=%v: Done report gives the grant back: %v", marked, !marked)
		}
		// The mark lives with its grant: the next update's grant decides
		// for itself.
		w.set(func(w *world) { w.desired = Desired{Target: "os-3", Grant: "g2", GrantTarget: "os-3"} })
		if got := settle(t, m); got != v1alpha1.StepRebooting {
			t.Fatalf("marked=%v: second update: step %s, want Rebooting", marked, got)
		}
		if m.State().ReleaseAtDone {
			t.Fatalf("marked=%v: the unmarked second grant is marked in the state", marked)
		}
	}
}

// released reports whether a report patch removes every release key.
func released(report map[string]*string) bool {
	for _, k := range v1alpha1.ReleaseKeys() {
		if v, ok := report[k]; !ok || v != nil {
			return false
		}
	}
	return true
}

// TestReleaseAtDoneIsRead: the annotation is read as a bool and a bad
// value is an error naming it, with the rest of the wishes still read.
func TestReleaseAtDoneIsRead(t *testing.T) {
	t.Parallel()
	p := &AnnotationProtocol{}
	node := func(v string) *corev1.Node {
		return &corev1.Node{ObjectMeta: metav1.ObjectMeta{Annotations: map[string]string{
			v1alpha1.AnnotationGrant: "g1", v1alpha1.AnnotationReleaseAtDone: v}}}
	}
	d, err := p.Desired(context.Background(), node("true"))
	if err != nil || !d.ReleaseAtDone {
		t.Fatalf("release-at-done true: %+v, %v", d, err)
	}
	d, err = p.Desired(context.Background(), node("yes please"))
	if err == nil || d.ReleaseAtDone || d.Grant != "g1" {
		t.Fatalf("release-at-done malformed: %+v, %v; want an error, no release, the grant still read", d, err)
	}
	if want := v1alpha1.AnnotationReleaseAtDone; !strings.Contains(err.Error(), want) {
		t.Fatalf("the error does not name %s: %v", want, err)
	}
}
