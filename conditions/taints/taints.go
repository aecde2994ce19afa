// Package taints parses, prints and validates node taints in the forms
// `kubectl taint` accepts, and matches tolerations against taints. The rules
// are the API server's: this package delegates to k8s.io/api,
// k8s.io/apimachinery validation and k8s.io/component-helpers rather than
// re-implementing them.
package taints

import (
	"fmt"
	"strings"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/util/validation"
	corev1helpers "k8s.io/component-helpers/scheduling/corev1"
	"k8s.io/klog/v2"
)

// Spec is one argument of `kubectl taint`: a taint to add, or a taint (or
// every taint with a key) to remove.
type Spec struct {
	Taint corev1.Taint
	// Remove is set by the trailing "-" forms: `key-` removes every effect
	// of key (Taint.Effect is empty), `key:Effect-` removes one.
	Remove bool
}

// String prints spec back in the form Parse accepts.
func (s Spec) String() string {
	if !s.Remove {
		return Format(s.Taint)
	}
	if s.Taint.Effect == "" {
		return s.Taint.Key + "-"
	}
	return s.Taint.Key + ":" + string(s.Taint.Effect) + "-"
}

// Format prints taint as key=value:Effect, or key:Effect when the value is
// empty.
func Format(taint corev1.Taint) string {
	if taint.Value == "" {
		return taint.Key + ":" + string(taint.Effect)
	}
	return taint.Key + "=" + taint.Value + ":" + string(taint.Effect)
}

// Parse reads one of key=value:Effect, key:Effect, key- and key:Effect-.
// Keys, values and effects are validated as the API server validates them.
func Parse(s string) (Spec, error) {
	if strings.HasSuffix(s, "-") {
		body := strings.TrimSuffix(s, "-")
		key, effect, hasEffect := strings.Cut(body, ":")
		spec := Spec{Remove: true, Taint: corev1.Taint{Key: key}}
		if hasEffect {
			spec.Taint.Effect = corev1.TaintEffect(effect)
			if err := ValidateEffect(spec.Taint.Effect); err != nil {
				return Spec{}, fmt.Errorf("taint %q: %w", s, err)
			}
		}
		if strings.Contains(key, "=") {
			return Spec{}, fmt.Errorf("taint %q: a removal names a key (and an effect), not a value", s)
		}
		if err := ValidateKey(key); err != nil {
			return Spec{}, fmt.Errorf("taint %q: %w", s, err)
		}
		return spec, nil
	}
	keyValue, effect, ok := strings.Cut(s, ":")
	if !ok || strings.Contains(effect, ":") {
		return Spec{}, fmt.Errorf("taint %q: want key=value:Effect, key:Effect, key- or key:Effect-", s)
	}
	key, value, _ := strings.Cut(keyValue, "=")
	taint := corev1.Taint{Key: key, Value: value, Effect: corev1.TaintEffect(effect)}
	if err := Validate(taint); err != nil {
		return Spec{}, fmt.Errorf("taint %q: %w", s, err)
	}
	return Spec{Taint: taint}, nil
}

// Validate checks a taint as the API server does for a Node's spec.taints.
func Validate(taint corev1.Taint) error {
	if err := ValidateKey(taint.Key); err != nil {
		return err
	}
	if err := ValidateValue(taint.Value); err != nil {
		return err
	}
	return ValidateEffect(taint.Effect)
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

// ValidateList checks every taint and refuses two taints with the same key
// and effect, as the API server does.
func ValidateList(list []corev1.Taint) error {
	seen := make(map[string]bool, len(list))
	for i, taint := range list {
		if err := Validate(taint); err != nil {
			return fmt.Errorf("taints[%d]: %w", i, err)
		}
		id := taint.Key + ":" + string(taint.Effect)
		if seen[id] {
			return fmt.Errorf("taints[%d]: duplicate key and effect %q", i, id)
		}
		seen[id] = true
	}
	return nil
}

// Apply returns list with spec applied: an added taint replaces one with the
// same key and effect; a removal drops the matching taints. The input is not
// modified.
func Apply(list []corev1.Taint, spec Spec) []corev1.Taint {
	out := make([]corev1.Taint, 0, len(list)+1)
	for _, taint := range list {
		sameKey := taint.Key == spec.Taint.Key
		sameEffect := spec.Taint.Effect == "" || taint.Effect == spec.Taint.Effect
		if sameKey && sameEffect {
			continue
		}
		out = append(out, taint)
	}
	if !spec.Remove {
		out = append(out, spec.Taint)
	}
	return out
}

// Tolerates reports whether toleration tolerates taint: Equal (the default)
// or Exists, an empty key with Exists tolerating everything, an empty effect
// matching every effect.
func Tolerates(toleration corev1.Toleration, taint corev1.Taint) bool {
	return toleration.ToleratesTaint(klog.Background(), &taint, false)
}

// Untolerated returns the first taint of list with an effect in effects
// (all effects when none is given) that no toleration tolerates.
func Untolerated(list []corev1.Taint, tolerations []corev1.Toleration, effects ...corev1.TaintEffect) (corev1.Taint, bool) {
	filter := func(t *corev1.Taint) bool {
		if len(effects) == 0 {
			return true
		}
		for _, e := range effects {
			if t.Effect == e {
				return true
			}
		}
		return false
	}
	return corev1helpers.FindMatchingUntoleratedTaint(klog.Background(), list, tolerations, filter, false)
}

// ToleratedFor says how long a pod with tolerations may stay on a node with
// a NoExecute taint: forever (ok, forever), for a bounded time (the shortest
// tolerationSeconds among the matching tolerations), or not at all (ok is
// false).
func ToleratedFor(tolerations []corev1.Toleration, taint corev1.Taint) (seconds int64, forever, ok bool) {
	forever = true
	for _, tol := range tolerations {
		if !Tolerates(tol, taint) {
			continue
		}
		ok = true
		if tol.TolerationSeconds != nil {
			s := max(*tol.TolerationSeconds, 0)
			if forever || s < seconds {
				seconds = s
			}
			forever = false
		}
	}
	if !ok {
		return 0, false, false
	}
	return seconds, forever, true
}
