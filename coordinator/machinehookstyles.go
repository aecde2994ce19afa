package coordinator

// How each Machine API lets nodeward hold a Machine's drain: one style per
// API (machineAPI.hook).

import (
	"context"
	"encoding/json"
	"fmt"

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
)

// hookStyle is how one Machine API holds a drain.
type hookStyle interface {
	held(m *unstructured.Unstructured) bool
	hold(ctx context.Context, api dynamic.ResourceInterface, gvr schema.GroupVersionResource, name string) error
	drop(ctx context.Context, api dynamic.ResourceInterface, gvr schema.GroupVersionResource, name string) error
}

// lifecycleHook is OpenShift's spec.lifecycleHooks.preDrain, a list keyed
// by name. nodeward adds and removes its one entry by a JSON patch that
// first tests the Machine's resourceVersion: a Machine changed since it was
// read is left alone and the next pass tries again, and no other owner's
// entry is ever rewritten. (A server-side apply of the entry left the
// emptied lifecycleHooks null on a Machine the machine controller had
// updated, which the CRD refuses.)
type lifecycleHook struct{}

func (lifecycleHook) held(m *unstructured.Unstructured) bool {
	return hookIndex(m) >= 0
}

// hookIndex is the position of nodeward's entry in m's preDrain hooks, -1
// when there is none.
func hookIndex(m *unstructured.Unstructured) int {
	hooks, _, _ := unstructured.NestedSlice(m.Object, "spec", "lifecycleHooks", "preDrain")
	for i, h := range hooks {
		if hook, _ := h.(map[string]any); hook["name"] == MachineHookName {
			return i
		}
	}
	return -1
}

func (lifecycleHook) hold(ctx context.Context, api dynamic.ResourceInterface, _ schema.GroupVersionResource, name string) error {
	m, err := api.Get(ctx, name, metav1.GetOptions{})
	if err != nil || hookIndex(m) >= 0 {
		return err
	}
	entry := map[string]any{"name": MachineHookName, "owner": MachineHookOwner}
	op := map[string]any{"op": "add", "path": "/spec/lifecycleHooks/preDrain/-", "value": entry}
	if _, found, _ := unstructured.NestedSlice(m.Object, "spec", "lifecycleHooks", "preDrain"); !found {
		op = map[string]any{"op": "add", "path": "/spec/lifecycleHooks/preDrain", "value": []any{entry}}
		if _, found, _ := unstructured.NestedMap(m.Object, "spec", "lifecycleHooks"); !found {
			op = map[string]any{"op": "add", "path": "/spec/lifecycleHooks", "value": map[string]any{"preDrain": []any{entry}}}
		}
	}
	return patchAt(ctx, api, m, op)
}

func (lifecycleHook) drop(ctx context.Context, api dynamic.ResourceInterface, _ schema.GroupVersionResource, name string) error {
	m, err := api.Get(ctx, name, metav1.GetOptions{})
	if err != nil {
		return err
	}
	i := hookIndex(m)
	if i < 0 {
		return nil
	}
	return patchAt(ctx, api, m, map[string]any{"op": "remove", "path": fmt.Sprintf("/spec/lifecycleHooks/preDrain/%d", i)})
}

// patchAt applies op to m, only if m is still at the resourceVersion read.
func patchAt(ctx context.Context, api dynamic.ResourceInterface, m *unstructured.Unstructured, op map[string]any) error {
	patch, err := json.Marshal([]any{
		map[string]any{"op": "test", "path": "/metadata/resourceVersion", "value": m.GetResourceVersion()}, op})
	if err != nil {
		return err
	}
	_, err = api.Patch(ctx, m.GetName(), types.JSONPatchType, patch, metav1.PatchOptions{})
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
