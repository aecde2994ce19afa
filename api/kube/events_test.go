package kube_test

import (
	"context"
	"fmt"
	"os"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/fields"
	"k8s.io/apimachinery/pkg/types"
	testingclock "k8s.io/utils/clock/testing"

	"github.com/nodeward/nodeward/api/kube"
	"github.com/nodeward/nodeward/test/cluster"
)

var env cluster.Env

func TestMain(m *testing.M) { os.Exit(env.Run(m)) }

// eventsAbout lists the Events of the default namespace about the object name.
func eventsAbout(t *testing.T, cp *cluster.ControlPlane, name string) []corev1.Event {
	t.Helper()
	list, err := cp.Client().CoreV1().Events(metav1.NamespaceDefault).List(context.Background(), metav1.ListOptions{
		FieldSelector: fields.OneTermEqualSelector("involvedObject.name", name).String()})
	if err != nil {
		t.Fatal(err)
	}
	return list.Items
}

// TestRecorderWritesAndCountsEvents: on the real API server, an Event is
// written with its source and object, an identical one raises its count
// instead of making a second, and Shutdown writes what is queued.
func TestRecorderWritesAndCountsEvents(t *testing.T) {
	t.Parallel()
	cp := env.ControlPlane(t)
	name := fmt.Sprintf("recorder-count-%d", time.Now().UnixNano())
	ref := &corev1.ObjectReference{APIVersion: "v1", Kind: "Node", Name: name, UID: types.UID(name)}
	r := cp.Kube().NewRecorder(context.Background(), corev1.EventSource{Component: "nodeward-test", Host: "h1"}, kube.RecorderOptions{})
	r.Event(ref, corev1.EventTypeWarning, "Stuck", "drain blocked")
	r.Event(ref, corev1.EventTypeWarning, "Stuck", "drain blocked")
	r.Eventf(ref, corev1.EventTypeNormal, "Drained", "%d pods evicted", 3)
	r.Shutdown(10 * time.Second)

	got := eventsAbout(t, cp, name)
	if len(got) != 2 {
		t.Fatalf("%d Events, want 2 (the repeated one counted): %+v", len(got), got)
	}
	byReason := map[string]corev1.Event{}
	for _, e := range got {
		byReason[e.Reason] = e
	}
	stuck, drained := byReason["Stuck"], byReason["Drained"]
	if stuck.Count != 2 || stuck.Type != corev1.EventTypeWarning || stuck.Message != "drain blocked" {
		t.Errorf("Stuck: count %d type %q message %q, want 2, Warning, the message", stuck.Count, stuck.Type, stuck.Message)
	}
	if drained.Count != 1 || drained.Message != "3 pods evicted" || drained.Type != corev1.EventTypeNormal {
		t.Errorf("Drained: count %d type %q message %q", drained.Count, drained.Type, drained.Message)
	}
	if stuck.Source.Component != "nodeward-test" || stuck.Source.Host != "h1" || stuck.ReportingController != "nodeward-test" ||
		stuck.InvolvedObject.Kind != "Node" || stuck.InvolvedObject.UID != types.UID(name) {
		t.Errorf("Stuck: source %+v, reporting %q, object %+v", stuck.Source, stuck.ReportingController, stuck.InvolvedObject)
	}
	// Events after Shutdown are not written.
	r.Event(ref, corev1.EventTypeNormal, "Late", "after shutdown")
	if got := eventsAbout(t, cp, name); len(got) != 2 {
		t.Errorf("%d Events after a post-shutdown Event, want 2", len(got))
	}
}

// TestRecorderSpamFilter: one object gets a burst of RecorderBurst Events
// of a type, then one per RecorderRefill; the other type has its own.
func TestRecorderSpamFilter(t *testing.T) {
	t.Parallel()
	cp := env.ControlPlane(t)
	name := fmt.Sprintf("recorder-spam-%d", time.Now().UnixNano())
	ref := &corev1.ObjectReference{APIVersion: "v1", Kind: "Node", Name: name, UID: types.UID(name)}
	clk := testingclock.NewFakeClock(time.Now())
	r := cp.Kube().NewRecorder(context.Background(), corev1.EventSource{Component: "nodeward-test"}, kube.RecorderOptions{Now: clk.Now})
	for i := range kube.RecorderBurst + 10 {
		clk.Step(time.Millisecond)
		r.Eventf(ref, corev1.EventTypeNormal, "Flap", "flap %d", i)
	}
	r.Event(ref, corev1.EventTypeWarning, "Broken", "a warning has its own budget")
	clk.Step(kube.RecorderRefill)
	r.Event(ref, corev1.EventTypeNormal, "Flap", "after the refill")
	r.Event(ref, corev1.EventTypeNormal, "Flap", "past the refill's one token")
	r.Shutdown(30 * time.Second)

	got := eventsAbout(t, cp, name)
	if len(got) != kube.RecorderBurst+2 {
		t.Fatalf("%d Events, want %d: the burst, the warning and one after the refill", len(got), kube.RecorderBurst+2)
	}
	seen := map[string]bool{}
	for _, e := range got {
		seen[e.Message] = true
	}
	if !seen["flap 0"] || !seen[fmt.Sprintf("flap %d", kube.RecorderBurst-1)] || seen[fmt.Sprintf("flap %d", kube.RecorderBurst)] ||
		!seen["after the refill"] || seen["past the refill's one token"] || !seen["a warning has its own budget"] {
		t.Errorf("written messages %v: want flap 0..%d and the first after the refill", seen, kube.RecorderBurst-1)
	}
}
