package drain

import (
	"errors"
	"fmt"
	"os"
	"slices"
	"strconv"
	"strings"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/labels"
	"k8s.io/apimachinery/pkg/util/validation"
	"sigs.k8s.io/yaml"

	"github.com/nodeward/nodeward/api/v1alpha1"
)

// Behavior is what a drain does with the pods a rule matches.
type Behavior string

const (
	// BehaviorEvict evicts the pods in the rule's order (default).
	BehaviorEvict Behavior = "Evict"
	// BehaviorSkip leaves the pods on the node.
	BehaviorSkip Behavior = "Skip"
	// BehaviorWaitCompleted does not evict the pods but waits, in the
	// rule's order, until they complete (batch jobs that must finish).
	BehaviorWaitCompleted Behavior = "WaitCompleted"
)

// RulesKind is the kind a rules file declares.
const RulesKind = "DrainRules"

// Rule matches pods by namespace and/or label selector. A rule with neither
// would match every pod; it must say so with an empty podSelector ({}).
type Rule struct {
	Name        string                `json:"name"`
	Namespaces  []string              `json:"namespaces,omitempty"`
	PodSelector *metav1.LabelSelector `json:"podSelector,omitempty"`
	Order       int32                 `json:"order,omitempty"`
	Behavior    Behavior              `json:"behavior,omitempty"`

	selector labels.Selector
}

// Rules order a drain: the first rule matching a pod gives its order and
// behavior; pods no rule matches get DefaultOrder and are evicted. Lower
// orders drain first, each batch gone before the next starts.
type Rules struct {
	Kind         string `json:"kind"`
	DefaultOrder int32  `json:"defaultOrder,omitempty"`
	Rules        []Rule `json:"rules"`
}

// LoadRules reads and validates a rules file.
func LoadRules(path string) (*Rules, error) {
	data, err := os.ReadFile(path)
	if err != nil {
		return nil, fmt.Errorf("read drain rules: %w", err)
	}
	r, err := ParseRules(data)
	if err != nil {
		return nil, fmt.Errorf("drain rules %s: %w", path, err)
	}
	return r, nil
}

// ParseRules decodes YAML or JSON rules strictly (unknown fields are errors)
// and validates every rule; the error names each bad field.
func ParseRules(data []byte) (*Rules, error) {
	var r Rules
	if err := yaml.UnmarshalStrict(data, &r); err != nil {
		return nil, fmt.Errorf("decode: %w", err)
	}
	if err := r.validate(); err != nil {
		return nil, err
	}
	return &r, nil
}

func (r *Rules) validate() error {
	var errs []error
	if r.Kind != RulesKind {
		errs = append(errs, fmt.Errorf("kind %q: must be %s", r.Kind, RulesKind))
	}
	seen := map[string]bool{}
	for i := range r.Rules {
		rule := &r.Rules[i]
		field := fmt.Sprintf("rules[%d]", i)
		if msgs := validation.IsDNS1123Label(rule.Name); len(msgs) > 0 {
			errs = append(errs, fmt.Errorf("%s.name %q: %s", field, rule.Name, strings.Join(msgs, "; ")))
		} else if seen[rule.Name] {
			errs = append(errs, fmt.Errorf("%s.name %q: duplicate", field, rule.Name))
		}
		seen[rule.Name] = true
		for j, ns := range rule.Namespaces {
			if msgs := validation.IsDNS1123Label(ns); len(msgs) > 0 {
				errs = append(errs, fmt.Errorf("%s.namespaces[%d] %q: %s", field, j, ns, strings.Join(msgs, "; ")))
			}
		}
		if len(rule.Namespaces) == 0 && rule.PodSelector == nil {
			errs = append(errs, fmt.Errorf("%s: needs namespaces or podSelector (use podSelector: {} to match every pod)", field))
		}
		if rule.PodSelector != nil {
			sel, err := metav1.LabelSelectorAsSelector(rule.PodSelector)
			if err != nil {
				errs = append(errs, fmt.Errorf("%s.podSelector: %w", field, err))
			}
			rule.selector = sel
		} else {
			rule.selector = labels.Everything()
		}
		switch rule.Behavior {
		case "":
			rule.Behavior = BehaviorEvict
		case BehaviorEvict, BehaviorSkip, BehaviorWaitCompleted:
		default:
			errs = append(errs, fmt.Errorf("%s.behavior %q: must be Evict, Skip or WaitCompleted", field, rule.Behavior))
		}
	}
	return errors.Join(errs...)
}

// match returns the first rule matching pod, or nil.
func (r *Rules) match(pod *corev1.Pod) *Rule {
	if r == nil {
		return nil
	}
	for i := range r.Rules {
		rule := &r.Rules[i]
		if len(rule.Namespaces) > 0 && !slices.Contains(rule.Namespaces, pod.Namespace) {
			continue
		}
		if rule.selector.Matches(labels.Set(pod.Labels)) {
			return rule
		}
	}
	return nil
}

// orderOf gives pod's order and behavior: the pod annotation overrides the
// order, the matching rule gives both, else DefaultOrder and Evict. rule
// names the rule that decided, for the plan.
func (r *Rules) orderOf(pod *corev1.Pod) (order int32, behavior Behavior, rule string, err error) {
	behavior = BehaviorEvict
	if r != nil {
		order = r.DefaultOrder
	}
	if m := r.match(pod); m != nil {
		order, behavior, rule = m.Order, m.Behavior, m.Name
	}
	if v, ok := pod.Annotations[v1alpha1.AnnotationDrainOrder]; ok {
		n, perr := strconv.ParseInt(strings.TrimSpace(v), 10, 32)
		if perr != nil {
			return 0, "", "", fmt.Errorf("pod %s/%s: annotation %s=%q: must be an integer",
				pod.Namespace, pod.Name, v1alpha1.AnnotationDrainOrder, v)
		}
		order, rule = int32(n), "annotation"
	}
	return order, behavior, rule, nil
}
