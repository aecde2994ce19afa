package taints

import (
	"strings"
	"testing"

	corev1 "k8s.io/api/core/v1"
)

func TestFormatPrintsKubectlForms(t *testing.T) {
	t.Parallel()
	cases := []struct {
		taint corev1.Taint
		want  string
	}{
		{corev1.Taint{Key: "dedicated", Value: "gpu", Effect: corev1.TaintEffectNoSchedule}, "dedicated=gpu:NoSchedule"},
		{corev1.Taint{Key: "nodeward.io/memory-pressure", Effect: corev1.TaintEffectNoSchedule}, "nodeward.io/memory-pressure:NoSchedule"},
	}
	for _, c := range cases {
		if got := Format(c.taint); got != c.want {
			t.Errorf("Format(%+v) = %q, want %q", c.taint, got, c.want)
		}
	}
}

// validate checks a taint's parts as the policy table's validation does.
func validate(taint corev1.Taint) error {
	if err := ValidateKey(taint.Key); err != nil {
		return err
	}
	if err := ValidateValue(taint.Value); err != nil {
		return err
	}
	return ValidateEffect(taint.Effect)
}

func TestValidateRefusesWhatTheAPIServerRefuses(t *testing.T) {
	t.Parallel()
	long := strings.Repeat("a", 64)
	ok := corev1.TaintEffectNoSchedule
	for _, taint := range []corev1.Taint{
		{Key: "", Effect: ok}, {Key: "k", Effect: ""}, {Key: "k", Effect: "Sometimes"},
		{Key: "-k", Effect: ok}, {Key: "k_", Effect: ok}, {Key: long, Effect: ok},
		{Key: "k", Value: long, Effect: ok}, {Key: "k", Value: "v w", Effect: ok},
		{Key: "a/b/c", Effect: ok}, {Key: "UPPER.example/k", Effect: ok},
		{Key: strings.Repeat("a", 254) + "/k", Effect: ok},
	} {
		if err := validate(taint); err == nil {
			t.Errorf("%+v accepted, want an error", taint)
		}
	}
	for _, taint := range []corev1.Taint{
		{Key: "dedicated", Value: "gpu", Effect: corev1.TaintEffectNoSchedule},
		{Key: "example.com/k", Effect: corev1.TaintEffectPreferNoSchedule},
		{Key: "k", Effect: corev1.TaintEffectNoExecute},
	} {
		if err := validate(taint); err != nil {
			t.Errorf("%+v refused: %v", taint, err)
		}
	}
	// The longest legal key: a 253-character prefix and a 63-character name.
	prefix := strings.Repeat("a", 63) + "." + strings.Repeat("b", 63) + "." + strings.Repeat("c", 63) + "." + strings.Repeat("d", 61)
	if err := ValidateKey(prefix + "/" + strings.Repeat("n", 63)); err != nil {
		t.Errorf("longest legal key refused: %v", err)
	}
}

func TestTolerations(t *testing.T) {
	t.Parallel()
	taint := corev1.Taint{Key: "nodeward.io/disk-pressure", Value: "v", Effect: corev1.TaintEffectNoExecute}
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
}
