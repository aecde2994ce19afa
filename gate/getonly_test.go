package gate_test

import (
	"context"
	"net/http"
	"net/http/httptest"
	"net/http/httputil"
	"net/url"
	"slices"
	"sync"
	"testing"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/nodeward/nodeward/api/v1alpha1"
	"github.com/nodeward/nodeward/gate"
)

// TestQueriesAskByGET: in front of the real Prometheus, a proxy refuses
// every POST with 403, as kube-rbac-proxy does before OpenShift's
// thanos-querier for a reader that may not create. Alert and query gates
// pass through it, and so does an instant query (the update risks'), and
// every request it saw was a GET (without getOnly, each query came as a
// POST refused, then a GET).
func TestQueriesAskByGET(t *testing.T) {
	t.Parallel()
	e := startEnv(t)
	upstream, err := url.Parse(e.prom.URL)
	if err != nil {
		t.Fatal(err)
	}
	var mu sync.Mutex
	var methods []string
	proxy := httputil.NewSingleHostReverseProxy(upstream)
	front := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		mu.Lock()
		methods = append(methods, r.Method+" "+r.URL.Path)
		mu.Unlock()
		if r.Method != http.MethodGet {
			http.Error(w, "Forbidden (user=system:serviceaccount:nodeward-system:nodeward-coordinator, verb=create)", http.StatusForbidden)
			return
		}
		proxy.ServeHTTP(w, r)
	}))
	t.Cleanup(front.Close)
	e.prom.WaitValue(t, `nodeward_test_value{case="bounds"}`, 5, settle)

	gates := &v1alpha1.Gates{Prometheus: front.URL, Alerts: &metav1.LabelSelector{},
		Queries: []v1alpha1.GateQuery{{Name: "bounded", Query: `nodeward_test_value{case="bounds"}`, Min: str("0"), Max: str("5")}}}
	expect(t, e.evaluate(t, gates), gate.ReasonPassing)
	ctx, cancel := context.WithTimeout(context.Background(), settle)
	defer cancel()
	if _, err := e.ev.Instant(ctx, front.URL, "vector(1)", 5*time.Second); err != nil {
		t.Errorf("an instant query through a proxy refusing POST: %v", err)
	}
	mu.Lock()
	defer mu.Unlock()
	if len(methods) < 3 || slices.ContainsFunc(methods, func(m string) bool { return m[:4] != "GET " }) {
		t.Errorf("the proxy saw %v; want alerts, query and instant query, all GET", methods)
	}
}
