// Package taints prints node taints in kubectl's form, validates their
// parts and matches tolerations against them. The rules are the API
// server's: this package delegates to k8s.io/api and k8s.io/apimachinery
// validation rather than re-implementing them.
package taints

import (
	"fmt"
	"strings"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/util/validation"
	"k8s.io/klog/v2"
)

// Format prints taint as key=value:Effect, or key:Effect when the value is
// empty.
func Format(taint corev1.Taint) string {
	if taint.Value == "" {
		return taint.Key + ":" + string(taint.Effect)
	}
	return taint.Key + "=" + taint.Value + ":" + string(taint.Effect)
}

// ValidateKey checks a taint key: a qualified name (optional DNS subdomain
// prefix and "/", then a name of at most 63 characters).
func ValidateKey(key string) error {
	if errs := validation.IsQualifiedName(key); len(errs) > 0 {
		return fmt.Errorf("invalid key %q: %s", key, strings.Join(errs, "; "))
	}
	return nil
}

// ValidateValue checks a taint value; empty is allowed.
func ValidateValue(value string) error {
	if value == "" {
		return nil
	}
	if errs := validation.IsValidLabelValue(value); len(errs) > 0 {
		return fmt.Errorf("invalid value %q: %s", value, strings.Join(errs, "; "))
	}
	return nil
}

// ValidateEffect accepts NoSchedule, PreferNoSchedule and NoExecute.
func ValidateEffect(effect corev1.TaintEffect) error {
	switch effect {
	case corev1.TaintEffectNoSchedule, corev1.TaintEffectPreferNoSchedule, corev1.TaintEffectNoExecute:
		return nil
	}
	return fmt.Errorf("invalid effect %q: want %s, %s or %s", effect,
		corev1.TaintEffectNoSchedule, corev1.TaintEffectPreferNoSchedule, corev1.TaintEffectNoExecute)
}

// Tolerates reports whether toleration tolerates taint: Equal (the default)
// or Exists, an empty key with Exists tolerating everything, an empty effect
// matching every effect.
func Tolerates(toleration corev1.Toleration, taint corev1.Taint) bool {
	return toleration.ToleratesTaint(klog.Background(), &taint, false)
}
