package conditions

import (
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/nodeward/nodeward/api/v1alpha1"
)

func TestHysteresisNeedsBadSamplesAndQuietPeriod(t *testing.T) {
	t.Parallel()
	h := NewHysteresis(v1alpha1.ConditionDiskPressure, HysteresisConfig{BadSamples: 2, QuietPeriod: metav1.Duration{Duration: time.Minute}})
	t0 := time.Unix(1000, 0)
	at := func(d time.Duration, health Verdict) bool {
		return h.Observe(Signal{Verdict: health, At: t0.Add(d), Reason: health.String()})
	}
	if h.Condition().Status != corev1.ConditionUnknown {
		t.Fatal("a fresh condition must be Unknown")
	}
	if !at(0, Healthy) || h.Condition().Status != corev1.ConditionFalse {
		t.Fatal("first healthy sample must make it False")
	}
	if at(time.Second, Unhealthy) || h.Condition().Status != corev1.ConditionFalse {
		t.Fatal("one bad sample of two must not make it True")
	}
	at(2*time.Second, Healthy) // resets the count
	if at(3*time.Second, Unhealthy) {
		t.Fatal("bad samples must be consecutive")
	}
	if !at(4*time.Second, Unhealthy) || h.Condition().Status != corev1.ConditionTrue {
		t.Fatal("two consecutive bad samples must make it True")
	}
	if got := h.Condition().DetectedAt; !got.Equal(t0.Add(4 * time.Second)) {
		t.Errorf("DetectedAt %v, want the crossing sample's time", got)
	}
	if want := t0.Add(4*time.Second + time.Minute); !h.QuietUntil().Equal(want) {
		t.Errorf("QuietUntil %v, want %v", h.QuietUntil(), want)
	}
	if at(30*time.Second, Healthy) || at(40*time.Second, Unknown) || h.Condition().Status != corev1.ConditionTrue {
		t.Fatal("healthy or unknown samples inside the quiet period must not clear it")
	}
	if h.Condition().Reason != "Unhealthy" {
		t.Errorf("a True condition must keep saying why, reason %q", h.Condition().Reason)
	}
	if !at(64*time.Second, Healthy) || h.Condition().Status != corev1.ConditionFalse {
		t.Fatal("a healthy sample after the quiet period must clear it")
	}
	if !at(65*time.Second, Unknown) || h.Condition().Status != corev1.ConditionUnknown {
		t.Fatal("an unreadable source must make a False condition Unknown")
	}
}

func TestTaintTableMergeKeepsForeignTaints(t *testing.T) {
	t.Parallel()
	table := NewTaintTable(DefaultTaintPolicy())
	foreign := []corev1.Taint{
		{Key: "dedicated", Value: "gpu", Effect: corev1.TaintEffectNoSchedule},
		{Key: "node.kubernetes.io/unschedulable", Effect: corev1.TaintEffectNoSchedule},
	}
	conds := []Condition{
		{Type: v1alpha1.ConditionDiskPressure, Status: corev1.ConditionTrue},
		{Type: v1alpha1.ConditionMemoryPressure, Status: corev1.ConditionUnknown},
		{Type: v1alpha1.ConditionNetworkUnavailable, Status: corev1.ConditionFalse},
	}
	desired := table.Desired(conds)
	if len(desired) != 1 || desired[0].Key != "nodeward.io/disk-pressure" {
		t.Fatalf("Desired = %+v, want only the disk taint (Unknown never taints)", desired)
	}
	merged, changed := table.Merge(foreign, desired)
	if !changed || len(merged) != 3 || merged[0] != foreign[0] || merged[1] != foreign[1] {
		t.Fatalf("Merge = %+v, %v", merged, changed)
	}
	if _, changed := table.Merge(merged, desired); changed {
		t.Error("merging again must change nothing")
	}
	cleared, changed := table.Merge(merged, nil)
	if !changed || len(cleared) != 2 || cleared[0] != foreign[0] {
		t.Errorf("clearing: %+v", cleared)
	}
}
