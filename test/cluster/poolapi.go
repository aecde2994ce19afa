package cluster

import (
	"context"
	"fmt"
	"os"
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

// InstallPoolAPI installs the UpdatePool CRD from crdPath (an existing one
// is kept) and the agents' Lease namespace, and waits until pools are
// served.
func InstallPoolAPI(ctx context.Context, client kubernetes.Interface, dyn dynamic.Interface, crdPath string) error {
	data, err := os.ReadFile(crdPath)
	if err != nil {
		return fmt.Errorf("read UpdatePool CRD: %w", err)
	}
	var obj map[string]any
	if err := yaml.Unmarshal(data, &obj); err != nil {
		return fmt.Errorf("parse %s: %w", crdPath, err)
	}
	crds := schema.GroupVersionResource{Group: "apiextensions.k8s.io", Version: "v1", Resource: "customresourcedefinitions"}
	if _, err := dyn.Resource(crds).Create(ctx, &unstructured.Unstructured{Object: obj}, metav1.CreateOptions{}); err != nil && !apierrors.IsAlreadyExists(err) {
		return fmt.Errorf("install UpdatePool CRD: %w", err)
	}
	_, err = client.CoreV1().Namespaces().Create(ctx, &corev1.Namespace{
		ObjectMeta: metav1.ObjectMeta{Name: v1alpha1.AgentLeaseNamespace}}, metav1.CreateOptions{})
	if err != nil && !apierrors.IsAlreadyExists(err) {
		return fmt.Errorf("create namespace %s: %w", v1alpha1.AgentLeaseNamespace, err)
	}
	return wait.PollUntilContextTimeout(ctx, 100*time.Millisecond, 30*time.Second, true, func(ctx context.Context) (bool, error) {
		_, err := dyn.Resource(v1alpha1.UpdatePoolResource()).List(ctx, metav1.ListOptions{})
		return err == nil, nil
	})
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
