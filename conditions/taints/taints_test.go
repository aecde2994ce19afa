package taints

import (
	"strings"
	"testing"

	corev1 "k8s.io/api/core/v1"
)

func TestParseKubectlForms(t *testing.T) {
	t.Parallel()
	cases := []struct {
		in   string
		want Spec
	}{
		{"dedicated=gpu:NoSchedule", Spec{Taint: corev1.Taint{Key: "dedicated", Value: "gpu", Effect: corev1.TaintEffectNoSchedule}}},
		{"nodeward.io/memory-pressure:NoSchedule", Spec{Taint: corev1.Taint{Key: "nodeward.io/memory-pressure", Effect: corev1.TaintEffectNoSchedule}}},
		{"k=:PreferNoSchedule", Spec{Taint: corev1.Taint{Key: "k", Effect: corev1.TaintEffectPreferNoSchedule}}},
		{"example.com/k-", Spec{Remove: true, Taint: corev1.Taint{Key: "example.com/k"}}},
		{"k:NoExecute-", Spec{Remove: true, Taint: corev1.Taint{Key: "k", Effect: corev1.TaintEffectNoExecute}}},
	}
	for _, c := range cases {
		got, err := Parse(c.in)
		if err != nil {
			t.Errorf("Parse(%q): %v", c.in, err)
			continue
		}
		if got != c.want {
			t.Errorf("Parse(%q) = %+v, want %+v", c.in, got, c.want)
		}
		// k=:E prints as k:E; every other form round-trips exactly.
		if c.in != "k=:PreferNoSchedule" && got.String() != c.in {
			t.Errorf("Parse(%q).String() = %q", c.in, got.String())
		}
	}
}

func TestParseRefusesWhatTheAPIServerRefuses(t *testing.T) {
	t.Parallel()
	long := strings.Repeat("a", 64)
	for _, in := range []string{
		"", "k", "k=v", ":NoSchedule", "k:Sometimes", "k=v:NoSchedule:x",
		"-k:NoSchedule", "k_:NoSchedule", long + ":NoSchedule", "k=" + long + ":NoSchedule",
		"k=v w:NoSchedule", "a/b/c:NoSchedule", "UPPER.example/k:NoSchedule", "k=v-", "k:Bad-", "-",
		strings.Repeat("a", 254) + "/k:NoSchedule",
	} {
		if spec, err := Parse(in); err == nil {
			t.Errorf("Parse(%q) = %+v, want an error", in, spec)
		}
	}
	// The longest legal key: a 253-character prefix and a 63-character name.
	prefix := strings.Repeat("a", 63) + "." + strings.Repeat("b", 63) + "." + strings.Repeat("c", 63) + "." + strings.Repeat("d", 61)
	if _, err := Parse(prefix + "/" + strings.Repeat("n", 63) + ":NoSchedule"); err != nil {
		t.Errorf("longest legal key refused: %v", err)
	}
}

func TestApplyAddsReplacesAndRemoves(t *testing.T) {
	t.Parallel()
	list := []corev1.Taint{
		{Key: "a", Value: "1", Effect: corev1.TaintEffectNoSchedule},
		{Key: "a", Effect: corev1.TaintEffectNoExecute},
		{Key: "b", Effect: corev1.TaintEffectNoSchedule},
	}
	mustParse := func(s string) Spec {
		spec, err := Parse(s)
		if err != nil {
			t.Fatal(err)
		}
		return spec
	}
	got := Apply(list, mustParse("a=2:NoSchedule"))
	if len(got) != 3 || got[2].Value != "2" || got[0].Effect != corev1.TaintEffectNoExecute {
		t.Errorf("replace: %+v", got)
	}
	if got := Apply(list, mustParse("a-")); len(got) != 1 || got[0].Key != "b" {
		t.Errorf("remove by key: %+v", got)
	}
	if got := Apply(list, mustParse("a:NoExecute-")); len(got) != 2 || got[1].Key != "b" {
		t.Errorf("remove by key and effect: %+v", got)
	}
	if len(list) != 3 || list[0].Value != "1" {
		t.Errorf("Apply modified its input: %+v", list)
	}
	if err := ValidateList(append(list, corev1.Taint{Key: "b", Value: "x", Effect: corev1.TaintEffectNoSchedule})); err == nil {
		t.Error("duplicate key and effect accepted")
	}
}

func TestTolerations(t *testing.T) {
	t.Parallel()
	taint := corev1.Taint{Key: "nodeward.io/disk-pressure", Value: "v", Effect: corev1.TaintEffectNoExecute}
	sec := func(s int64) *int64 { return &s }
	cases := []struct {
		name string
		tol  corev1.Toleration
		want bool
	}{
		{"equal", corev1.Toleration{Key: taint.Key, Value: "v", Effect: corev1.TaintEffectNoExecute}, true},
		{"equal default operator other value", corev1.Toleration{Key: taint.Key, Value: "w"}, false},
		{"exists any value", corev1.Toleration{Key: taint.Key, Operator: corev1.TolerationOpExists}, true},
		{"empty key exists tolerates all", corev1.Toleration{Operator: corev1.TolerationOpExists}, true},
		{"other effect", corev1.Toleration{Key: taint.Key, Operator: corev1.TolerationOpExists, Effect: corev1.TaintEffectNoSchedule}, false},
		{"other key", corev1.Toleration{Key: "x", Operator: corev1.TolerationOpExists}, false},
	}
	for _, c := range cases {
		if got := Tolerates(c.tol, taint); got != c.want {
			t.Errorf("%s: Tolerates = %v, want %v", c.name, got, c.want)
		}
	}
	tols := []corev1.Toleration{
		{Key: taint.Key, Operator: corev1.TolerationOpExists, TolerationSeconds: sec(300)},
		{Operator: corev1.TolerationOpExists, Effect: corev1.TaintEffectNoExecute, TolerationSeconds: sec(60)},
	}
	if s, forever, ok := ToleratedFor(tols, taint); !ok || forever || s != 60 {
		t.Errorf("ToleratedFor = %d %v %v, want 60 seconds", s, forever, ok)
	}
	if _, forever, ok := ToleratedFor(tols[:1:1], corev1.Taint{Key: "other", Effect: corev1.TaintEffectNoExecute}); ok || forever {
		t.Error("untolerated taint reported tolerated")
	}
	if _, forever, ok := ToleratedFor([]corev1.Toleration{{Operator: corev1.TolerationOpExists}}, taint); !ok || !forever {
		t.Error("toleration without seconds should tolerate forever")
	}
	list := []corev1.Taint{{Key: "a", Effect: corev1.TaintEffectPreferNoSchedule}, taint}
	if got, ok := Untolerated(list, nil, corev1.TaintEffectNoExecute); !ok || got.Key != taint.Key {
		t.Errorf("Untolerated(NoExecute) = %+v %v", got, ok)
	}
	if _, ok := Untolerated(list, tols, corev1.TaintEffectNoExecute); ok {
		t.Error("tolerated taint reported untolerated")
	}
}

// FuzzParse: whatever Parse accepts is valid for the API server and prints
// back to a string that parses to the same spec.
func FuzzParse(f *testing.F) {
	for _, s := range []string{"k=v:NoSchedule", "k:NoExecute", "k-", "k:PreferNoSchedule-", "a.b/c=d:NoSchedule", "=:", "k=v:"} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, s string) {
		spec, err := Parse(s)
		if err != nil {
			return
		}
		if !spec.Remove {
			if err := Validate(spec.Taint); err != nil {
				t.Fatalf("Parse(%q) accepted an invalid taint: %v", s, err)
			}
		}
		again, err := Parse(spec.String())
		if err != nil || again != spec {
			t.Fatalf("Parse(%q) = %+v prints %q which parses to %+v, %v", s, spec, spec.String(), again, err)
		}
	})
}
