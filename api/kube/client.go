// Package kube is nodeward's client for the built-in Kubernetes resources
// it uses: Nodes, Pods, Events, ConfigMaps (core/v1), Leases
// (coordination.k8s.io/v1) and PodDisruptionBudgets and evictions
// (policy/v1).
//
// Why not client-go's clientset: every typed client of client-go imports
// k8s.io/client-go/kubernetes/scheme, which registers all 55 built-in group
// versions at start-up and keeps their generated code in the binary. That
// alone costs the agent about 11 MB of binary and 5 MiB of resident memory
// (docs/benchmarks.md, "Agent RSS"), against a 30 MiB budget. This package
// builds generic typed clients (Resource: the calls of client-go's generated
// clients, spelled the same) on a scheme of the three group versions
// nodeward needs, so the call sites read as they would with the clientset.
package kube

import (
	"context"
	"fmt"

	coordinationv1 "k8s.io/api/coordination/v1"
	corev1 "k8s.io/api/core/v1"
	policyv1 "k8s.io/api/policy/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/apimachinery/pkg/runtime/serializer"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/rest"
	"k8s.io/client-go/util/flowcontrol"
)

// Typed clients, named after the resources they serve.
type (
	NodeClient      = Resource[*corev1.Node, *corev1.NodeList]
	PodClient       = Resource[*corev1.Pod, *corev1.PodList]
	EventClient     = Resource[*corev1.Event, *corev1.EventList]
	ConfigMapClient = Resource[*corev1.ConfigMap, *corev1.ConfigMapList]
	LeaseClient     = Resource[*coordinationv1.Lease, *coordinationv1.LeaseList]
	PDBClient       = Resource[*policyv1.PodDisruptionBudget, *policyv1.PodDisruptionBudgetList]
)

// Client reaches the core/v1, coordination.k8s.io/v1 and policy/v1 APIs
// over one HTTP client and one client-side rate limiter, as the clientset
// does.
type Client struct {
	scheme       *runtime.Scheme
	params       runtime.ParameterCodec
	core         rest.Interface
	coordination rest.Interface
	policy       rest.Interface
	host         string
}

// NewScheme returns a scheme of the group versions this package serves.
func NewScheme() (*runtime.Scheme, error) {
	s := runtime.NewScheme()
	metav1.AddToGroupVersion(s, schema.GroupVersion{Version: "v1"})
	for _, add := range []func(*runtime.Scheme) error{
		corev1.AddToScheme, coordinationv1.AddToScheme, policyv1.AddToScheme,
	} {
		if err := add(s); err != nil {
			return nil, fmt.Errorf("build API scheme: %w", err)
		}
	}
	return s, nil
}

// NewForConfig returns a client for cfg. As with client-go, a QPS of zero
// means client-go's default limit (5 per second, bursts of 10).
func NewForConfig(cfg *rest.Config) (*Client, error) {
	s, err := NewScheme()
	if err != nil {
		return nil, err
	}
	config := rest.CopyConfig(cfg)
	if config.UserAgent == "" {
		config.UserAgent = rest.DefaultKubernetesUserAgent()
	}
	// Built-in types travel as protobuf, as they do for the kubelet and the
	// controller manager: a Node or a Lease decodes from protobuf at a
	// fraction of the JSON decoder's CPU and allocations, and the
	// coordinator decodes every Lease renewal of the cluster (125 a second
	// at 10,000 nodes; docs/benchmarks.md). JSON stays accepted for a
	// server or proxy that answers in it; patches keep their JSON bodies.
	if config.ContentType == "" {
		config.ContentType = runtime.ContentTypeProtobuf
	}
	if config.AcceptContentTypes == "" {
		config.AcceptContentTypes = runtime.ContentTypeProtobuf + "," + runtime.ContentTypeJSON
	}
	if config.RateLimiter == nil && config.QPS > 0 {
		if config.Burst <= 0 {
			return nil, fmt.Errorf("kube client: burst must be positive when qps (%v) is set", config.QPS)
		}
		config.RateLimiter = flowcontrol.NewTokenBucketRateLimiter(config.QPS, config.Burst)
	}
	httpClient, err := rest.HTTPClientFor(config)
	if err != nil {
		return nil, fmt.Errorf("kube client: %w", err)
	}
	codecs := serializer.NewCodecFactory(s)
	c := &Client{scheme: s, params: runtime.NewParameterCodec(s), host: config.Host}
	for _, g := range []struct {
		dst     *rest.Interface
		apiPath string
		gv      schema.GroupVersion
	}{
		{&c.core, "/api", corev1.SchemeGroupVersion},
		{&c.coordination, "/apis", coordinationv1.SchemeGroupVersion},
		{&c.policy, "/apis", policyv1.SchemeGroupVersion},
	} {
		gc := rest.CopyConfig(config)
		gv := g.gv
		gc.GroupVersion, gc.APIPath = &gv, g.apiPath
		gc.NegotiatedSerializer = rest.CodecFactoryForGeneratedClient(s, codecs).WithoutConversion()
		rc, err := rest.RESTClientForConfigAndClient(gc, httpClient)
		if err != nil {
			return nil, fmt.Errorf("kube client for %s: %w", gv, err)
		}
		*g.dst = rc
	}
	return c, nil
}

// Scheme is the scheme of the served group versions, for event recorders
// and object references.
func (c *Client) Scheme() *runtime.Scheme { return c.scheme }

// Host is the API server's address as configured, for log lines.
func (c *Client) Host() string { return c.host }

// CoreREST and CoordinationREST are the raw REST clients, for list+watch
// of informers (cache.NewListWatchFromClient).
func (c *Client) CoreREST() rest.Interface         { return c.core }
func (c *Client) CoordinationREST() rest.Interface { return c.coordination }

// Nodes is the cluster-scoped Node client.
func (c *Client) Nodes() *NodeClient {
	return newResource[*corev1.Node, *corev1.NodeList](c, c.core, "nodes", "",
		func() *corev1.Node { return &corev1.Node{} }, func() *corev1.NodeList { return &corev1.NodeList{} })
}

// PatchNodeStatus applies a strategic-merge patch to a Node's status, as
// the clientset's Nodes().PatchStatus does.
func (c *Client) PatchNodeStatus(ctx context.Context, name string, data []byte) (*corev1.Node, error) {
	return c.Nodes().Patch(ctx, name, types.StrategicMergePatchType, data, metav1.PatchOptions{}, "status")
}

// Pods is the Pod client of a namespace (metav1.NamespaceAll for lists and
// watches across namespaces).
func (c *Client) Pods(namespace string) *PodClient {
	return newResource[*corev1.Pod, *corev1.PodList](c, c.core, "pods", namespace,
		func() *corev1.Pod { return &corev1.Pod{} }, func() *corev1.PodList { return &corev1.PodList{} })
}

// Evict asks the API server to evict a pod through the policy/v1 Eviction
// subresource, which honours PodDisruptionBudgets.
func (c *Client) Evict(ctx context.Context, eviction *policyv1.Eviction) error {
	return c.core.Post().Namespace(eviction.Namespace).Resource("pods").Name(eviction.Name).
		SubResource("eviction").Body(eviction).Do(ctx).Error()
}

// Events is the core/v1 Event client of a namespace.
func (c *Client) Events(namespace string) *EventClient {
	return newResource[*corev1.Event, *corev1.EventList](c, c.core, "events", namespace,
		func() *corev1.Event { return &corev1.Event{} }, func() *corev1.EventList { return &corev1.EventList{} })
}

// ConfigMaps is the ConfigMap client of a namespace.
func (c *Client) ConfigMaps(namespace string) *ConfigMapClient {
	return newResource[*corev1.ConfigMap, *corev1.ConfigMapList](c, c.core, "configmaps", namespace,
		func() *corev1.ConfigMap { return &corev1.ConfigMap{} }, func() *corev1.ConfigMapList { return &corev1.ConfigMapList{} })
}

// Leases is the coordination.k8s.io/v1 Lease client of a namespace.
func (c *Client) Leases(namespace string) *LeaseClient {
	return newResource[*coordinationv1.Lease, *coordinationv1.LeaseList](c, c.coordination, "leases", namespace,
		func() *coordinationv1.Lease { return &coordinationv1.Lease{} }, func() *coordinationv1.LeaseList { return &coordinationv1.LeaseList{} })
}

// PodDisruptionBudgets is the policy/v1 PodDisruptionBudget client of a
// namespace.
func (c *Client) PodDisruptionBudgets(namespace string) *PDBClient {
	return newResource[*policyv1.PodDisruptionBudget, *policyv1.PodDisruptionBudgetList](c, c.policy, "poddisruptionbudgets", namespace,
		func() *policyv1.PodDisruptionBudget { return &policyv1.PodDisruptionBudget{} },
		func() *policyv1.PodDisruptionBudgetList { return &policyv1.PodDisruptionBudgetList{} })
}
