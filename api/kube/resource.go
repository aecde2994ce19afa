package kube

import (
	"context"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/apimachinery/pkg/watch"
	"k8s.io/client-go/rest"
)

// object is what a Resource serves: a Kubernetes object with metadata.
type object interface {
	runtime.Object
	metav1.Object
}

// Resource is the typed client of one resource in one namespace (or of a
// cluster-scoped resource): the calls of client-go's generated typed
// clients, spelled the same, over a rest.Interface.
//
// Why not client-go's own generic client (k8s.io/client-go/gentype): that
// package also holds the fake clients for tests, and so links
// k8s.io/client-go/testing, whose managed-fields and structured-merge-diff
// machinery initializes type tables at every start (97 KB of heap in
// sigs.k8s.io/structured-merge-diff's typed package alone, GODEBUG=inittrace)
// and keeps their code in the agent's binary (docs/benchmarks.md, agent RSS).
type Resource[T object, L runtime.Object] struct {
	rest      rest.Interface
	params    runtime.ParameterCodec
	resource  string
	namespace string
	newObject func() T
	newList   func() L
}

func newResource[T object, L runtime.Object](c *Client, client rest.Interface, resource, namespace string, newObject func() T, newList func() L) *Resource[T, L] {
	return &Resource[T, L]{rest: client, params: c.params, resource: resource, namespace: namespace, newObject: newObject, newList: newList}
}

// request starts a request on this resource, in its namespace when it has one.
func (r *Resource[T, L]) request(req *rest.Request) *rest.Request {
	return req.NamespaceIfScoped(r.namespace, r.namespace != "").Resource(r.resource)
}

// Get reads the object name.
func (r *Resource[T, L]) Get(ctx context.Context, name string, opts metav1.GetOptions) (T, error) {
	result := r.newObject()
	err := r.request(r.rest.Get()).Name(name).VersionedParams(&opts, r.params).Do(ctx).Into(result)
	return result, err
}

// List lists the objects opts selects.
func (r *Resource[T, L]) List(ctx context.Context, opts metav1.ListOptions) (L, error) {
	result := r.newList()
	err := r.request(r.rest.Get()).VersionedParams(&opts, r.params).Timeout(timeoutOf(opts)).Do(ctx).Into(result)
	return result, err
}

// Watch watches the objects opts selects.
func (r *Resource[T, L]) Watch(ctx context.Context, opts metav1.ListOptions) (watch.Interface, error) {
	opts.Watch = true
	return r.request(r.rest.Get()).VersionedParams(&opts, r.params).Timeout(timeoutOf(opts)).Watch(ctx)
}

// Create creates obj and returns the object the server stored.
func (r *Resource[T, L]) Create(ctx context.Context, obj T, opts metav1.CreateOptions) (T, error) {
	result := r.newObject()
	err := r.request(r.rest.Post()).VersionedParams(&opts, r.params).Body(obj).Do(ctx).Into(result)
	return result, err
}

// Update replaces obj (with its resourceVersion as the precondition).
func (r *Resource[T, L]) Update(ctx context.Context, obj T, opts metav1.UpdateOptions) (T, error) {
	return r.put(ctx, obj, opts, "")
}

// UpdateStatus replaces obj's status subresource.
func (r *Resource[T, L]) UpdateStatus(ctx context.Context, obj T, opts metav1.UpdateOptions) (T, error) {
	return r.put(ctx, obj, opts, "status")
}

func (r *Resource[T, L]) put(ctx context.Context, obj T, opts metav1.UpdateOptions, subresource string) (T, error) {
	result := r.newObject()
	req := r.request(r.rest.Put()).Name(obj.GetName())
	if subresource != "" {
		req = req.SubResource(subresource)
	}
	err := req.VersionedParams(&opts, r.params).Body(obj).Do(ctx).Into(result)
	return result, err
}

// Patch applies a patch of type pt to the object name, or to its
// subresources.
func (r *Resource[T, L]) Patch(ctx context.Context, name string, pt types.PatchType, data []byte, opts metav1.PatchOptions, subresources ...string) (T, error) {
	result := r.newObject()
	err := r.request(r.rest.Patch(pt)).Name(name).SubResource(subresources...).
		VersionedParams(&opts, r.params).Body(data).Do(ctx).Into(result)
	return result, err
}

// Delete deletes the object name.
func (r *Resource[T, L]) Delete(ctx context.Context, name string, opts metav1.DeleteOptions) error {
	return r.request(r.rest.Delete()).Name(name).Body(&opts).Do(ctx).Error()
}

// timeoutOf is a list or watch's server-side timeout as the client's too,
// as client-go's typed clients set it.
func timeoutOf(opts metav1.ListOptions) time.Duration {
	if opts.TimeoutSeconds == nil {
		return 0
	}
	return time.Duration(*opts.TimeoutSeconds) * time.Second
}
