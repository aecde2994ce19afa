package mustgather

import (
	"context"
	"fmt"
	"strings"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime/schema"
)

// nodeAnnotationKeys: a Node's annotations kept are those whose key
// contains one of these: nodeward's protocol, drain, hooks and cordon
// record (every nodeward.io/ prefix), the MCO's, and the Machine link.
var nodeAnnotationKeys = []string{"nodeward.io/", "machineconfiguration.openshift.io/", "machine.openshift.io/machine", "cluster.x-k8s.io/machine"}

// nodeFields are the parts of a Node kept whole besides its annotations
// (its images list and the rest of its status are left out).
var nodeFields = [][]string{
	{"metadata", "name"}, {"metadata", "labels"}, {"metadata", "creationTimestamp"}, {"metadata", "resourceVersion"},
	{"spec", "unschedulable"}, {"spec", "taints"}, {"spec", "providerID"},
	{"status", "conditions"}, {"status", "nodeInfo"},
}

func collectNodes(ctx context.Context, g *Gatherer, w *partWriter) error {
	items, err := g.list(ctx, nodes, "", metav1.ListOptions{})
	if err != nil {
		return err
	}
	for _, n := range items {
		summary := pick(n, nodeFields)
		summary["annotations"] = keepAnnotations(n, nodeAnnotationKeys)
		name, _, _ := unstructured.NestedString(n, "metadata", "name")
		if err := w.json("nodes/"+safeName(name)+".json", "Node "+name+": nodeward's view of it", summary); err != nil {
			return err
		}
	}
	return nil
}

// pick copies the fields of obj at paths into a flat map keyed by each
// path's last element.
func pick(obj map[string]any, paths [][]string) map[string]any {
	out := map[string]any{}
	for _, p := range paths {
		if v, found, _ := unstructured.NestedFieldNoCopy(obj, p...); found {
			out[p[len(p)-1]] = v
		}
	}
	return out
}

func keepAnnotations(obj map[string]any, keys []string) map[string]string {
	all, _, _ := unstructured.NestedStringMap(obj, "metadata", "annotations")
	kept := map[string]string{}
	for k, v := range all {
		for _, want := range keys {
			if strings.Contains(k, want) {
				kept[k] = v
				break
			}
		}
	}
	return kept
}

// machineFields: what of a Machine tells about nodeward's hold on it.
var machineFields = [][]string{
	{"metadata", "namespace"}, {"metadata", "name"}, {"metadata", "annotations"}, {"metadata", "labels"},
	{"metadata", "deletionTimestamp"}, {"spec", "lifecycleHooks"}, {"spec", "providerID"},
	{"status", "phase"}, {"status", "nodeRef"}, {"status", "errorReason"}, {"status", "errorMessage"},
}

// machinesInto writes a summary of every Machine of gvr (not their
// provider specs, which name cloud credentials' Secrets and user data).
func machinesInto(gvr schema.GroupVersionResource, file string) func(context.Context, *Gatherer, *partWriter) error {
	return func(ctx context.Context, g *Gatherer, w *partWriter) error {
		items, err := g.list(ctx, gvr, "", metav1.ListOptions{})
		if err != nil {
			return err
		}
		out := make([]map[string]any, 0, len(items))
		for _, m := range items {
			out = append(out, pick(m, machineFields))
		}
		return w.json(file, fmt.Sprintf("%d %s: hooks and annotations", len(out), gvr.GroupResource()), out)
	}
}
