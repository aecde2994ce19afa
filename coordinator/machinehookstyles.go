package coordinator

// How each Machine API lets nodeward hold a Machine's drain: one style per
// API (machineAPI.hook).

import (
	"context"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/dynamic"
)

// The hook nodeward holds on a Machine while its node updates.
const (
	// MachineHookName and MachineHookOwner name nodeward's entry of
	// OpenShift's spec.lifecycleHooks.preDrain.
	MachineHookName  = "nodeward.io/Update"
	MachineHookOwner = "nodeward"
	// ClusterAPIHookAnnotation is nodeward's Cluster API pre-drain hook.
	ClusterAPIHookAnnotation = "pre-drain.delete.hook.machine.cluster.x-k8s.io/nodeward-update"
	// hookFieldManager owns nodeward's entry of a Machine's hooks (server-
	// side apply): applying none removes it and nothing of another owner.
	hookFieldManager = "nodeward-coordinator-hooks"
)

// hookStyle is how one Machine API holds a drain.
type hookStyle interface {
	held(m *unstructured.Unstructured) bool
	hold(ctx context.Context, api dynamic.ResourceInterface, gvr schema.GroupVersionResource, name string) error
	drop(ctx context.Context, api dynamic.ResourceInterface, gvr schema.GroupVersionResource, name string) error
}

// lifecycleHook is OpenShift's spec.lifecycleHooks.preDrain, a list keyed
// by name: nodeward applies its one entry and only ever touches it.
type lifecycleHook struct{}

func (lifecycleHook) held(m *unstructured.Unstructured) bool {
	hooks, _, _ := unstructured.NestedSlice(m.Object, "spec", "lifecycleHooks", "preDrain")
	for _, h := range hooks {
		if hook, _ := h.(map[string]any); hook["name"] == MachineHookName {
			return true
		}
	}
	return false
}

func (l lifecycleHook) hold(ctx context.Context, api dynamic.ResourceInterface, gvr schema.GroupVersionResource, name string) error {
	return l.apply(ctx, api, gvr, name, []any{map[string]any{"name": MachineHookName, "owner": MachineHookOwner}})
}

func (l lifecycleHook) drop(ctx context.Context, api dynamic.ResourceInterface, gvr schema.GroupVersionResource, name string) error {
	return l.apply(ctx, api, gvr, name, []any{})
}

func (lifecycleHook) apply(ctx context.Context, api dynamic.ResourceInterface, gvr schema.GroupVersionResource, name string, hooks []any) error {
	obj := &unstructured.Unstructured{Object: map[string]any{
		"apiVersion": gvr.GroupVersion().String(), "kind": "Machine",
		"metadata": map[string]any{"name": name},
		"spec":     map[string]any{"lifecycleHooks": map[string]any{"preDrain": hooks}},
	}}
	_, err := api.Apply(ctx, name, obj, metav1.ApplyOptions{FieldManager: hookFieldManager, Force: true})
	return err
}

// annotationHook is Cluster API's pre-drain hook annotation.
type annotationHook struct{}

func (annotationHook) held(m *unstructured.Unstructured) bool {
	_, ok := m.GetAnnotations()[ClusterAPIHookAnnotation]
	return ok
}

func (annotationHook) hold(ctx context.Context, api dynamic.ResourceInterface, _ schema.GroupVersionResource, name string) error {
	_, err := api.Patch(ctx, name, types.MergePatchType,
		[]byte(`{"metadata":{"annotations":{"`+ClusterAPIHookAnnotation+`":"`+MachineHookOwner+`"}}}`), metav1.PatchOptions{})
	return err
}

func (annotationHook) drop(ctx context.Context, api dynamic.ResourceInterface, _ schema.GroupVersionResource, name string) error {
	_, err := api.Patch(ctx, name, types.MergePatchType,
		[]byte(`{"metadata":{"annotations":{"`+ClusterAPIHookAnnotation+`":null}}}`), metav1.PatchOptions{})
	return err
}
