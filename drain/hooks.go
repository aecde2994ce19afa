package drain

import (
	"context"
	"fmt"
	"sort"
	"strings"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/fields"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/watch"
	"k8s.io/client-go/tools/cache"
	watchtools "k8s.io/client-go/tools/watch"

	"github.com/nodeward/nodeward/api/kube"
	"github.com/nodeward/nodeward/api/v1alpha1"
)

// Hook is a lifecycle hook on a Node: the annotation "<prefix><name>:
// <owner>" holds its step until the owner removes it.
type Hook struct {
	Name, Owner string
}

func (h Hook) String() string { return h.Name + " (owner " + h.Owner + ")" }

// HookPoint is a step lifecycle hooks can hold, with the condition that
// reports it.
type HookPoint struct {
	Prefix    string
	Condition corev1.NodeConditionType
}

var (
	// PreDrain hooks hold the drain (condition Drainable).
	PreDrain = HookPoint{Prefix: v1alpha1.PreDrainHookPrefix, Condition: v1alpha1.ConditionDrainable}
	// PreReboot hooks hold the reboot (condition Rebootable).
	PreReboot = HookPoint{Prefix: v1alpha1.PreRebootHookPrefix, Condition: v1alpha1.ConditionRebootable}
)

// Hooks lists the hooks of point present on node, sorted by name.
func (p HookPoint) Hooks(node *corev1.Node) []Hook {
	var out []Hook
	for k, owner := range node.Annotations {
		if name, ok := strings.CutPrefix(k, p.Prefix); ok {
			out = append(out, Hook{Name: name, Owner: owner})
		}
	}
	sort.Slice(out, func(i, j int) bool { return out[i].Name < out[j].Name })
	return out
}

// Describe says which hooks hold the step, or "" when none does.
func (p HookPoint) Describe(hooks []Hook) string {
	if len(hooks) == 0 {
		return ""
	}
	names := make([]string, len(hooks))
	for i, h := range hooks {
		names[i] = h.String()
	}
	return fmt.Sprintf("held by %d %s hooks: %s", len(hooks), strings.TrimSuffix(p.Prefix, ".hook.nodeward.io/"),
		strings.Join(names, ", "))
}

// Publish sets point's condition on node: False naming the hooks while any
// holds the step, True otherwise.
func (p HookPoint) Publish(ctx context.Context, client *kube.Client, node string, hooks []Hook) error {
	if len(hooks) > 0 {
		return SetCondition(ctx, client, node, p.Condition, corev1.ConditionFalse, "HooksPresent", p.Describe(hooks))
	}
	return SetCondition(ctx, client, node, p.Condition, corev1.ConditionTrue, "NoHooks", "no hook holds this step")
}

// WaitForHooks watches the node until no hook of point is present, keeping
// the condition up to date; onHeld is told each new set of holding hooks.
func WaitForHooks(ctx context.Context, client *kube.Client, node string, point HookPoint, onHeld func([]Hook)) error {
	selector := fields.OneTermEqualSelector("metadata.name", node).String()
	lw := &cache.ListWatch{
		ListWithContextFunc: func(ctx context.Context, o metav1.ListOptions) (runtime.Object, error) {
			o.FieldSelector = selector
			return client.Nodes().List(ctx, o)
		},
		WatchFuncWithContext: func(ctx context.Context, o metav1.ListOptions) (watch.Interface, error) {
			o.FieldSelector = selector
			return client.Nodes().Watch(ctx, o)
		},
	}
	last := "-"
	var publishErr error
	_, err := watchtools.UntilWithSync(ctx, lw, &corev1.Node{}, nil, func(ev watch.Event) (bool, error) {
		n, ok := ev.Object.(*corev1.Node)
		if !ok {
			return false, nil
		}
		hooks := point.Hooks(n)
		desc := point.Describe(hooks)
		if desc != last {
			last = desc
			if onHeld != nil && len(hooks) > 0 {
				onHeld(hooks)
			}
			publishErr = point.Publish(ctx, client, node, hooks)
		}
		return len(hooks) == 0, nil
	})
	if err != nil {
		return fmt.Errorf("wait for %shooks on node %s: %w", point.Prefix, node, err)
	}
	return publishErr
}
