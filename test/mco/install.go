package mco

import (
	"context"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/apimachinery/pkg/util/wait"
	"k8s.io/client-go/dynamic"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/rest"
	"k8s.io/client-go/util/retry"
	"sigs.k8s.io/yaml"
)

// The resources the controllers read (all served, or their informers never
// sync), by the group/version/plural of the CRDs in crds/.
var (
	MachineConfigs        = schema.GroupVersionResource{Group: "machineconfiguration.openshift.io", Version: "v1", Resource: "machineconfigs"}
	MachineConfigPools    = schema.GroupVersionResource{Group: "machineconfiguration.openshift.io", Version: "v1", Resource: "machineconfigpools"}
	MachineConfigNodes    = schema.GroupVersionResource{Group: "machineconfiguration.openshift.io", Version: "v1", Resource: "machineconfignodes"}
	ControllerConfigs     = schema.GroupVersionResource{Group: "machineconfiguration.openshift.io", Version: "v1", Resource: "controllerconfigs"}
	Infrastructures       = schema.GroupVersionResource{Group: "config.openshift.io", Version: "v1", Resource: "infrastructures"}
	Schedulers            = schema.GroupVersionResource{Group: "config.openshift.io", Version: "v1", Resource: "schedulers"}
	MachineConfigurations = schema.GroupVersionResource{Group: "operator.openshift.io", Version: "v1", Resource: "machineconfigurations"}
	crdResource           = schema.GroupVersionResource{Group: "apiextensions.k8s.io", Version: "v1", Resource: "customresourcedefinitions"}
)

// Namespace is where the controllers write events.
const Namespace = "openshift-machine-config-operator"

// ControllerConfigName is the ControllerConfig every pool sync reads.
const ControllerConfigName = "machine-config-controller"

// Control-plane topologies (Infrastructure status.controlPlaneTopology).
const (
	HighlyAvailable = "HighlyAvailable"
	SingleReplica   = "SingleReplica"
)

// Client reads and writes the MCO's objects on a control plane: a clientset
// for nodes and a dynamic client for the OpenShift types (nodeward does not
// depend on openshift/api).
type Client struct {
	Kube kubernetes.Interface
	Dyn  dynamic.Interface
	// Dir is the MCO directory (crds/, examples/), see Dir.
	Dir string
	t   testing.TB
}

// NewClient makes a Client for cfg (an admin config) and the MCO directory.
func NewClient(t testing.TB, cfg *rest.Config, dir string) *Client {
	t.Helper()
	// The OpenShift CRDs use formats the API server does not know ("ip");
	// its warnings about them say nothing about the test.
	cfg = rest.CopyConfig(cfg)
	cfg.WarningHandler = rest.NoWarnings{}
	kube, err := kubernetes.NewForConfig(cfg)
	if err != nil {
		t.Fatal(err)
	}
	dyn, err := dynamic.NewForConfig(cfg)
	if err != nil {
		t.Fatal(err)
	}
	return &Client{Kube: kube, Dyn: dyn, Dir: dir, t: t}
}

// InstallOptions tune Install.
type InstallOptions struct {
	// Topology is the control-plane topology written to the Infrastructure
	// and the ControllerConfig; HighlyAvailable when empty.
	Topology string
}

// Install makes the control plane ready for the controllers: every CRD of
// crds/ (waiting until each is served), the namespaces of
// examples/00-namespace.yaml, the ControllerConfig of
// examples/10-controllerconfig.yaml and the `cluster` Scheduler,
// Infrastructure and MachineConfiguration. Objects that exist are kept, so
// the tests of a package can share one control plane; the topology is set
// every time (SetTopology).
func (c *Client) Install(ctx context.Context, opts InstallOptions) error {
	if opts.Topology == "" {
		opts.Topology = HighlyAvailable
	}
	crds, err := c.installCRDs(ctx)
	if err != nil {
		return err
	}
	for _, gvr := range crds {
		if err := wait.PollUntilContextTimeout(ctx, 100*time.Millisecond, 30*time.Second, true, func(ctx context.Context) (bool, error) {
			_, err := c.Dyn.Resource(gvr).List(ctx, metav1.ListOptions{Limit: 1})
			return err == nil, nil
		}); err != nil {
			return fmt.Errorf("%s not served: %w", gvr, err)
		}
	}
	docs, err := readDocs(filepath.Join(c.Dir, "examples", "00-namespace.yaml"))
	if err != nil {
		return err
	}
	for _, d := range docs {
		_, err := c.Kube.CoreV1().Namespaces().Create(ctx, &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: d.GetName()}}, metav1.CreateOptions{})
		if err != nil && !apierrors.IsAlreadyExists(err) {
			return fmt.Errorf("namespace %s: %w", d.GetName(), err)
		}
	}
	docs, err = readDocs(filepath.Join(c.Dir, "examples", "10-controllerconfig.yaml"))
	if err != nil {
		return err
	}
	if err := c.createIfMissing(ctx, ControllerConfigs, docs[0]); err != nil {
		return err
	}
	// Optional for the controllers (a missing one is only logged), but
	// their informers list them, and the Infrastructure carries the
	// topology single-node behaviour depends on.
	for _, o := range []struct {
		gvr  schema.GroupVersionResource
		kind string
		spec map[string]any
	}{
		{Schedulers, "config.openshift.io/v1/Scheduler", map[string]any{"mastersSchedulable": false}},
		{Infrastructures, "config.openshift.io/v1/Infrastructure", map[string]any{}},
		{MachineConfigurations, "operator.openshift.io/v1/MachineConfiguration", map[string]any{"managementState": "Managed"}},
	} {
		i := strings.LastIndex(o.kind, "/")
		obj := &unstructured.Unstructured{Object: map[string]any{
			"apiVersion": o.kind[:i], "kind": o.kind[i+1:],
			"metadata": map[string]any{"name": "cluster"}, "spec": o.spec,
		}}
		if err := c.createIfMissing(ctx, o.gvr, obj); err != nil {
			return err
		}
	}
	if err := c.PublishDisruptionPolicies(ctx); err != nil {
		return fmt.Errorf("publish the node disruption policies: %w", err)
	}
	return c.SetTopology(ctx, opts.Topology)
}

// installCRDs creates every CRD of crds/ that is missing and returns the
// resources they serve.
func (c *Client) installCRDs(ctx context.Context) ([]schema.GroupVersionResource, error) {
	files, err := filepath.Glob(filepath.Join(c.Dir, "crds", "*.yaml"))
	if err != nil || len(files) == 0 {
		return nil, fmt.Errorf("no CRDs in %s", filepath.Join(c.Dir, "crds"))
	}
	var served []schema.GroupVersionResource
	for _, f := range files {
		docs, err := readDocs(f)
		if err != nil {
			return nil, err
		}
		for _, crd := range docs {
			if err := c.createIfMissing(ctx, crdResource, crd); err != nil {
				return nil, err
			}
			group, _, _ := unstructured.NestedString(crd.Object, "spec", "group")
			plural, _, _ := unstructured.NestedString(crd.Object, "spec", "names", "plural")
			versions, _, _ := unstructured.NestedSlice(crd.Object, "spec", "versions")
			for _, v := range versions {
				if v, ok := v.(map[string]any); ok && v["served"] == true {
					served = append(served, schema.GroupVersionResource{Group: group, Version: v["name"].(string), Resource: plural})
				}
			}
		}
	}
	return served, nil
}

// SetTopology writes the control-plane topology where the controllers read
// it: the ControllerConfig's spec.infra.status (the node controller copies
// it onto every node's controlPlaneTopology annotation and decides by it)
// and the Infrastructure's status.
func (c *Client) SetTopology(ctx context.Context, topology string) error {
	infraTopology := HighlyAvailable
	if topology == SingleReplica {
		infraTopology = SingleReplica
	}
	// Parallel tests may Install at once: retry the read-modify-write.
	err := retry.RetryOnConflict(retry.DefaultRetry, func() error {
		cc, err := c.Dyn.Resource(ControllerConfigs).Get(ctx, ControllerConfigName, metav1.GetOptions{})
		if err != nil {
			return err
		}
		_ = unstructured.SetNestedField(cc.Object, topology, "spec", "infra", "status", "controlPlaneTopology")
		_ = unstructured.SetNestedField(cc.Object, infraTopology, "spec", "infra", "status", "infrastructureTopology")
		_, err = c.Dyn.Resource(ControllerConfigs).Update(ctx, cc, metav1.UpdateOptions{})
		return err
	})
	if err != nil {
		return fmt.Errorf("set the ControllerConfig's topology: %w", err)
	}
	err = retry.RetryOnConflict(retry.DefaultRetry, func() error {
		infra, err := c.Dyn.Resource(Infrastructures).Get(ctx, "cluster", metav1.GetOptions{})
		if err != nil {
			return err
		}
		infra.Object["status"] = map[string]any{
			"controlPlaneTopology": topology, "infrastructureTopology": infraTopology,
			"platform": "None", "platformStatus": map[string]any{"type": "None"},
		}
		_, err = c.Dyn.Resource(Infrastructures).UpdateStatus(ctx, infra, metav1.UpdateOptions{})
		return err
	})
	if err != nil {
		return fmt.Errorf("set the Infrastructure's topology: %w", err)
	}
	return nil
}

func (c *Client) createIfMissing(ctx context.Context, gvr schema.GroupVersionResource, obj *unstructured.Unstructured) error {
	_, err := c.Dyn.Resource(gvr).Create(ctx, obj, metav1.CreateOptions{})
	if err != nil && !apierrors.IsAlreadyExists(err) {
		return fmt.Errorf("create %s %s: %w", gvr.Resource, obj.GetName(), err)
	}
	return nil
}

// readDocs parses the YAML documents of a file (empty ones skipped).
func readDocs(path string) ([]*unstructured.Unstructured, error) {
	data, err := os.ReadFile(path)
	if err != nil {
		return nil, err
	}
	var out []*unstructured.Unstructured
	for _, doc := range strings.Split("\n"+string(data), "\n---") {
		var obj map[string]any
		if err := yaml.Unmarshal([]byte(doc), &obj); err != nil {
			return nil, fmt.Errorf("%s: %w", path, err)
		}
		if len(obj) > 0 {
			out = append(out, &unstructured.Unstructured{Object: obj})
		}
	}
	if len(out) == 0 {
		return nil, errors.New(path + ": no objects")
	}
	return out, nil
}
