package cluster

import (
	"context"
	"fmt"
	"strings"
	"sync"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/wait"
	"k8s.io/apimachinery/pkg/watch"
	"k8s.io/client-go/kubernetes"
)

const (
	// KwokAnnotation marks the nodes kwok manages (value "fake").
	KwokAnnotation = "kwok.x-k8s.io/node"
	// GroupLabel carries NodeSpec.Prefix on every node, so a test can keep
	// its pods on its own nodes with a nodeSelector.
	GroupLabel = "nodeward.test/group"
	// ZoneLabel is the well-known failure-domain label.
	ZoneLabel = "topology.kubernetes.io/zone"
)

// NodeSpec describes fake nodes to create.
type NodeSpec struct {
	// Prefix names the nodes Prefix-0, Prefix-1, ... and labels them with
	// GroupLabel=Prefix; it must be unique among a package's tests.
	Prefix string
	Count  int
	// Zones are assigned round-robin through ZoneLabel; none when empty.
	Zones []string
	// Role adds node-role.kubernetes.io/<Role>.
	Role        string
	Labels      map[string]string
	Annotations map[string]string
	// Taints are set at creation.
	Taints []corev1.Taint
}

// CreateNodes creates kwok-managed nodes, waits until each is Ready and
// deletes them when the test ends.
func (cp *ControlPlane) CreateNodes(t testing.TB, spec NodeSpec) []string {
	t.Helper()
	ctx := context.Background()
	names := make([]string, spec.Count)
	for i := range spec.Count {
		node := fakeNode(spec, i)
		names[i] = node.Name
		if _, err := cp.client.CoreV1().Nodes().Create(ctx, node, metav1.CreateOptions{}); err != nil {
			t.Fatalf("create node %s: %v", node.Name, err)
		}
	}
	t.Cleanup(func() {
		for _, n := range names {
			err := cp.client.CoreV1().Nodes().Delete(context.Background(), n, metav1.DeleteOptions{})
			if err != nil && !apierrors.IsNotFound(err) {
				t.Errorf("delete node %s: %v", n, err)
			}
		}
	})
	WaitFor(t, time.Minute, fmt.Sprintf("%d nodes %s-* Ready", spec.Count, spec.Prefix), func(ctx context.Context) (bool, error) {
		list, err := cp.client.CoreV1().Nodes().List(ctx, metav1.ListOptions{LabelSelector: GroupLabel + "=" + spec.Prefix})
		if err != nil {
			return false, err
		}
		ready := 0
		for i := range list.Items {
			if NodeReady(&list.Items[i]) {
				ready++
			}
		}
		return ready == spec.Count, nil
	})
	return names
}

func fakeNode(spec NodeSpec, i int) *corev1.Node {
	name := fmt.Sprintf("%s-%d", spec.Prefix, i)
	labels := map[string]string{
		"kubernetes.io/hostname": name,
		"kubernetes.io/os":       "linux",
		"kubernetes.io/arch":     "amd64",
		"type":                   "kwok",
		GroupLabel:               spec.Prefix,
	}
	if len(spec.Zones) > 0 {
		labels[ZoneLabel] = spec.Zones[i%len(spec.Zones)]
	}
	if spec.Role != "" {
		labels["node-role.kubernetes.io/"+spec.Role] = ""
	}
	for k, v := range spec.Labels {
		labels[k] = v
	}
	annotations := map[string]string{KwokAnnotation: "fake", "node.alpha.kubernetes.io/ttl": "0"}
	for k, v := range spec.Annotations {
		annotations[k] = v
	}
	capacity := corev1.ResourceList{
		corev1.ResourceCPU:    resource.MustParse("32"),
		corev1.ResourceMemory: resource.MustParse("256Gi"),
		corev1.ResourcePods:   resource.MustParse("250"),
	}
	return &corev1.Node{
		ObjectMeta: metav1.ObjectMeta{Name: name, Labels: labels, Annotations: annotations},
		Spec:       corev1.NodeSpec{Taints: spec.Taints},
		Status:     corev1.NodeStatus{Capacity: capacity, Allocatable: capacity},
	}
}

// NodeReady reports whether node's Ready condition is True.
func NodeReady(node *corev1.Node) bool {
	for _, c := range node.Status.Conditions {
		if c.Type == corev1.NodeReady {
			return c.Status == corev1.ConditionTrue
		}
	}
	return false
}

// Namespace creates a namespace for one test, waits for its default
// ServiceAccount (pods cannot be created before it exists) and deletes the
// namespace when the test ends.
func (cp *ControlPlane) Namespace(t testing.TB) string {
	t.Helper()
	ctx := context.Background()
	prefix := strings.ToLower(strings.NewReplacer("/", "-", "_", "-").Replace(t.Name()))
	if len(prefix) > 40 {
		prefix = prefix[:40]
	}
	ns, err := cp.client.CoreV1().Namespaces().Create(ctx, &corev1.Namespace{
		ObjectMeta: metav1.ObjectMeta{GenerateName: strings.Trim(prefix, "-.") + "-"},
	}, metav1.CreateOptions{})
	if err != nil {
		t.Fatalf("create namespace: %v", err)
	}
	t.Cleanup(func() {
		_ = cp.client.CoreV1().Namespaces().Delete(context.Background(), ns.Name, metav1.DeleteOptions{})
	})
	WaitFor(t, 30*time.Second, "default ServiceAccount in "+ns.Name, func(ctx context.Context) (bool, error) {
		_, err := cp.client.CoreV1().ServiceAccounts(ns.Name).Get(ctx, "default", metav1.GetOptions{})
		if apierrors.IsNotFound(err) {
			return false, nil
		}
		return err == nil, err
	})
	return ns.Name
}

// WaitFor polls cond every 100 ms until it is true, failing the test with
// what and the last error when timeout passes first. Errors from cond are
// treated as "not yet".
func WaitFor(t testing.TB, timeout time.Duration, what string, cond func(ctx context.Context) (bool, error)) {
	t.Helper()
	var (
		mu   sync.Mutex
		last error
	)
	ctx, cancel := context.WithTimeout(context.Background(), timeout)
	defer cancel()
	err := wait.PollUntilContextCancel(ctx, 100*time.Millisecond, true, func(ctx context.Context) (bool, error) {
		ok, err := cond(ctx)
		// A call cut short by the deadline says only that: keep the error
		// before it, which says what was still wrong.
		if err != nil && (ctx.Err() == nil || last == nil) {
			mu.Lock()
			last = err
			mu.Unlock()
		}
		return ok, nil
	})
	if err != nil {
		mu.Lock()
		defer mu.Unlock()
		t.Fatalf("timed out after %s waiting for %s (last error: %v)", timeout, what, last)
	}
}

// WatchNodes calls each with every event of the nodes a watch with opts
// delivers, one at a time from one goroutine, until the test ends; ctx ends
// with the watch. The watch has stopped when the test's earlier-registered
// cleanups run.
func WatchNodes(t testing.TB, client kubernetes.Interface, opts metav1.ListOptions,
	each func(ctx context.Context, ev watch.EventType, n *corev1.Node)) {
	t.Helper()
	ctx, cancel := context.WithCancel(context.Background())
	w, err := client.CoreV1().Nodes().Watch(ctx, opts)
	if err != nil {
		cancel()
		t.Fatalf("watch nodes (%+v): %v", opts, err)
	}
	done := make(chan struct{})
	go func() {
		defer close(done)
		for ev := range w.ResultChan() {
			if n, ok := ev.Object.(*corev1.Node); ok {
				each(ctx, ev.Type, n)
			}
		}
	}()
	t.Cleanup(func() { cancel(); w.Stop(); <-done })
}
