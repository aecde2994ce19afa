package coordinator_test

import (
	"context"
	"fmt"
	"net/http"
	"net/http/httptest"
	"net/url"
	"os"
	"slices"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/client-go/dynamic"
	"k8s.io/utils/ptr"

	"github.com/nodeward/nodeward/api/v1alpha1"
	"github.com/nodeward/nodeward/coordinator"
	"github.com/nodeward/nodeward/test/cluster"
	"github.com/nodeward/nodeward/updategraph"
	"github.com/nodeward/nodeward/updaterisk"
)

// graphServer serves an update graph the way a test sets it: the graph's
// JSON, garbage, an error status, or a response slower than the fetch
// timeout. It records the last query it was asked.
type graphServer struct {
	*httptest.Server
	body      atomic.Pointer[[]byte]
	mode      atomic.Value // "good", "garbage", "error", "slow"
	lastQuery atomic.Pointer[url.Values]
}

func newGraphServer(t *testing.T, body []byte) *graphServer {
	g := &graphServer{}
	g.body.Store(&body)
	g.mode.Store("good")
	g.Server = httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		q := r.URL.Query()
		g.lastQuery.Store(&q)
		switch g.mode.Load().(string) {
		case "garbage":
			_, _ = w.Write([]byte(`{"nodes": [{"version": 4}`))
		case "error":
			w.WriteHeader(http.StatusServiceUnavailable)
			_, _ = w.Write([]byte(`{"kind": "upstream_unreachable", "value": "the upstream is down"}`))
		case "slow":
			select {
			case <-r.Context().Done():
			case <-time.After(5 * time.Second):
			}
		default:
			_, _ = w.Write(*g.body.Load())
		}
	}))
	t.Cleanup(g.Close)
	return g
}

func readTestdata(t *testing.T, path string) []byte {
	t.Helper()
	data, err := os.ReadFile("../updategraph/testdata/" + path)
	if err != nil {
		t.Fatal(err)
	}
	return data
}

// openShiftGraph is the OpenShift test graph and its releases' payloads by
// version.
func openShiftGraph(t *testing.T) ([]byte, map[string]string) {
	t.Helper()
	data := readTestdata(t, "openshift/graph.json")
	g, err := updategraph.Parse(data)
	if err != nil {
		t.Fatal(err)
	}
	payloads := map[string]string{}
	for _, r := range g.Releases {
		payloads[r.Version] = r.Payload
	}
	return data, payloads
}

func typedPool(ctx context.Context, dyn dynamic.Interface, name string) (*v1alpha1.UpdatePool, error) {
	obj, err := dyn.Resource(v1alpha1.UpdatePoolResource()).Get(ctx, name, metav1.GetOptions{})
	if err != nil {
		return nil, err
	}
	var pool v1alpha1.UpdatePool
	if err := runtime.DefaultUnstructuredConverter.FromUnstructured(obj.Object, &pool); err != nil {
		return nil, err
	}
	return &pool, nil
}

// waitPool waits until ok holds of the pool as the API server has it.
func waitPool(t *testing.T, dyn dynamic.Interface, name, what string, timeout time.Duration, ok func(*v1alpha1.UpdatePool) error) *v1alpha1.UpdatePool {
	t.Helper()
	var last *v1alpha1.UpdatePool
	var lastErr error
	defer func() {
		if t.Failed() && lastErr != nil {
			t.Logf("pool %s, last seen: %v", name, lastErr)
		}
	}()
	cluster.WaitFor(t, timeout, fmt.Sprintf("pool %s: %s", name, what), func(ctx context.Context) (bool, error) {
		pool, err := typedPool(ctx, dyn, name)
		if err != nil {
			return false, err
		}
		last, lastErr = pool, ok(pool)
		return lastErr == nil, lastErr
	})
	return last
}

// retrieved checks the pool's RetrievedUpdates condition.
func retrieved(status metav1.ConditionStatus, reason string) func(*v1alpha1.UpdatePool) error {
	return func(pool *v1alpha1.UpdatePool) error {
		c := meta.FindStatusCondition(pool.Status.Conditions, v1alpha1.PoolRetrievedUpdates)
		if c == nil || c.Status != status || (reason != "" && c.Reason != reason) {
			return fmt.Errorf("RetrievedUpdates %+v, want %s %s", c, status, reason)
		}
		return nil
	}
}

// targetsOf records the pool's spec.osImage each time it changes, in order.
func targetsOf(ctx context.Context, t *testing.T, dyn dynamic.Interface, name string) func() []string {
	w, err := dyn.Resource(v1alpha1.UpdatePoolResource()).Watch(ctx, metav1.ListOptions{FieldSelector: "metadata.name=" + name})
	if err != nil {
		t.Fatalf("watch pool %s: %v", name, err)
	}
	var mu sync.Mutex
	var seen []string
	go func() {
		defer w.Stop()
		for ev := range w.ResultChan() {
			var pool v1alpha1.UpdatePool
			u, ok := ev.Object.(runtime.Unstructured)
			if !ok || runtime.DefaultUnstructuredConverter.FromUnstructured(u.UnstructuredContent(), &pool) != nil {
				continue
			}
			mu.Lock()
			if len(seen) == 0 || seen[len(seen)-1] != pool.Spec.OSImage {
				seen = append(seen, pool.Spec.OSImage)
			}
			mu.Unlock()
		}
	}()
	return func() []string {
		mu.Lock()
		defer mu.Unlock()
		return slices.Clone(seen)
	}
}

func sourcedPool(name, image string, src v1alpha1.UpdateSource, limit int32) *v1alpha1.UpdatePool {
	return &v1alpha1.UpdatePool{ObjectMeta: metav1.ObjectMeta{Name: name}, Spec: v1alpha1.UpdatePoolSpec{
		NodeSelector: &metav1.LabelSelector{MatchLabels: map[string]string{cluster.GroupLabel: name}},
		OSImage:      image, MaxUnavailable: ptr.To(intstrInt(limit)), UpdateSource: &src,
	}}
}

func fastFetches(o *coordinator.Config) {
	o.UpdateFetchInterval = 300 * time.Millisecond
	o.UpdateFetch = updategraph.FetchConfig{Timeout: 500 * time.Millisecond, MinBackoff: 200 * time.Millisecond, MaxBackoff: 400 * time.Millisecond}
}

// recommendAll is a RiskEvaluator that finds the cluster exposed to no risk.
type recommendAll struct{ calls atomic.Int32 }

func (r *recommendAll) Recommend(_ context.Context, _ *v1alpha1.UpdatePool, candidates []updaterisk.Candidate) []metav1.Condition {
	r.calls.Add(1)
	out := make([]metav1.Condition, len(candidates))
	for i, c := range candidates {
		out[i] = metav1.Condition{Status: metav1.ConditionTrue, Reason: "NotExposedToRisks",
			Message: fmt.Sprintf("none of %d risks applies", len(c.Risks))}
	}
	return out
}
