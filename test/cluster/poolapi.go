package cluster

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"time"

	coordinationv1 "k8s.io/api/coordination/v1"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/apimachinery/pkg/util/wait"
	"k8s.io/client-go/dynamic"
	"k8s.io/client-go/kubernetes"
	"k8s.io/utils/ptr"
	"sigs.k8s.io/yaml"

	v1alpha1 "github.com/nodeward/nodeward/api/v1alpha1"
)

// CRDDir is where the project keeps its CustomResourceDefinitions,
// relative to the module root.
const CRDDir = "manifests/crds"

var crdResource = schema.GroupVersionResource{Group: "apiextensions.k8s.io", Version: "v1", Resource: "customresourcedefinitions"}

// InstallCRDs installs every CustomResourceDefinition of the project
// (CRDDir, found from the module root, so it works from any package
// directory) and the agents' Lease namespace, and waits until every served
// version of every CRD answers. What exists already is kept: tests sharing
// a control plane may call it as often as they like, concurrently too.
func (cp *ControlPlane) InstallCRDs(ctx context.Context) error {
	root, err := RepoRoot()
	if err != nil {
		return fmt.Errorf("find the CRDs: %w", err)
	}
	files, err := filepath.Glob(filepath.Join(root, CRDDir, "*.yaml"))
	if err != nil {
		return fmt.Errorf("list %s: %w", CRDDir, err)
	}
	dyn, err := dynamic.NewForConfig(cp.Config())
	if err != nil {
		return fmt.Errorf("dynamic client for the CRDs: %w", err)
	}
	return installCRDFiles(ctx, cp.Client(), dyn, files)
}

// InstallCRDFiles installs the CustomResourceDefinitions of files (paths
// relative to the module root) and waits until they are served, as
// InstallCRDs does for the project's own: another API's CRDs a test reads
// (the Machine API's, say).
func (cp *ControlPlane) InstallCRDFiles(ctx context.Context, files ...string) error {
	root, err := RepoRoot()
	if err != nil {
		return fmt.Errorf("find the CRDs: %w", err)
	}
	for i, f := range files {
		files[i] = filepath.Join(root, f)
	}
	dyn, err := dynamic.NewForConfig(cp.Config())
	if err != nil {
		return fmt.Errorf("dynamic client for the CRDs: %w", err)
	}
	return installCRDFiles(ctx, cp.Client(), dyn, files)
}

// installCRDFiles creates the CustomResourceDefinitions among files (other
// documents, such as a kustomization.yaml, are skipped), the agents' Lease
// namespace, and waits until every CRD is served.
func installCRDFiles(ctx context.Context, client kubernetes.Interface, dyn dynamic.Interface, files []string) error {
	var served []schema.GroupVersionResource
	for _, path := range files {
		data, err := os.ReadFile(path)
		if err != nil {
			return fmt.Errorf("read CRD: %w", err)
		}
		var crd unstructured.Unstructured
		if err := yaml.Unmarshal(data, &crd.Object); err != nil {
			return fmt.Errorf("parse %s: %w", path, err)
		}
		if crd.GetKind() != "CustomResourceDefinition" {
			continue
		}
		resources, err := servedResources(&crd)
		if err != nil {
			return fmt.Errorf("read %s: %w", path, err)
		}
		served = append(served, resources...)
		if _, err := dyn.Resource(crdResource).Create(ctx, &crd, metav1.CreateOptions{}); err != nil && !apierrors.IsAlreadyExists(err) {
			return fmt.Errorf("install CRD %s: %w", crd.GetName(), err)
		}
	}
	if len(served) == 0 {
		return fmt.Errorf("no CustomResourceDefinition in %v", files)
	}
	_, err := client.CoreV1().Namespaces().Create(ctx, &corev1.Namespace{
		ObjectMeta: metav1.ObjectMeta{Name: v1alpha1.AgentLeaseNamespace}}, metav1.CreateOptions{})
	if err != nil && !apierrors.IsAlreadyExists(err) {
		return fmt.Errorf("create namespace %s: %w", v1alpha1.AgentLeaseNamespace, err)
	}
	for _, gvr := range served {
		err := wait.PollUntilContextTimeout(ctx, 100*time.Millisecond, 30*time.Second, true, func(ctx context.Context) (bool, error) {
			_, err := dyn.Resource(gvr).List(ctx, metav1.ListOptions{Limit: 1})
			return err == nil, nil
		})
		if err != nil {
			return fmt.Errorf("wait until %s is served: %w", gvr, err)
		}
	}
	return nil
}

// servedResources are the group/version/plural of every served version of
// a CRD: what must answer before a test may create objects of it.
func servedResources(crd *unstructured.Unstructured) ([]schema.GroupVersionResource, error) {
	group, _, _ := unstructured.NestedString(crd.Object, "spec", "group")
	plural, _, _ := unstructured.NestedString(crd.Object, "spec", "names", "plural")
	versions, _, err := unstructured.NestedSlice(crd.Object, "spec", "versions")
	if err != nil || group == "" || plural == "" {
		return nil, fmt.Errorf("CRD %s has no spec.group, spec.names.plural or spec.versions", crd.GetName())
	}
	var out []schema.GroupVersionResource
	for _, v := range versions {
		version, _ := v.(map[string]any)
		name, _ := version["name"].(string)
		if isServed, _ := version["served"].(bool); isServed && name != "" {
			out = append(out, schema.GroupVersionResource{Group: group, Version: name, Resource: plural})
		}
	}
	return out, nil
}

// CreateAgentLeases stands in for the health side of the agents, which
// renews each node's liveness Lease (the simulated update agents do not):
// one-hour Leases, enough for a test or a demo.
func CreateAgentLeases(ctx context.Context, client kubernetes.Interface, nodes []string) error {
	for _, n := range nodes {
		_, err := client.CoordinationV1().Leases(v1alpha1.AgentLeaseNamespace).Create(ctx, &coordinationv1.Lease{
			ObjectMeta: metav1.ObjectMeta{Name: v1alpha1.AgentLeaseName(n)},
			Spec: coordinationv1.LeaseSpec{HolderIdentity: ptr.To(n), LeaseDurationSeconds: ptr.To[int32](3600),
				RenewTime: &metav1.MicroTime{Time: time.Now()}},
		}, metav1.CreateOptions{})
		if err != nil {
			return fmt.Errorf("create Lease for %s: %w", n, err)
		}
	}
	return nil
}

// CreatePool creates an UpdatePool.
func CreatePool(ctx context.Context, dyn dynamic.Interface, pool *v1alpha1.UpdatePool) error {
	pool.TypeMeta = metav1.TypeMeta{APIVersion: v1alpha1.GroupName + "/" + v1alpha1.Version, Kind: "UpdatePool"}
	obj, err := runtime.DefaultUnstructuredConverter.ToUnstructured(pool)
	if err != nil {
		return fmt.Errorf("encode pool %s: %w", pool.Name, err)
	}
	if _, err := dyn.Resource(v1alpha1.UpdatePoolResource()).Create(ctx, &unstructured.Unstructured{Object: obj}, metav1.CreateOptions{}); err != nil {
		return fmt.Errorf("create pool %s: %w", pool.Name, err)
	}
	return nil
}
