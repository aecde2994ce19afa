package kube

import (
	"errors"
	"net/http"
	"net/http/httptest"
	"runtime"
	"strings"
	"testing"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/testutil"
)

// TestRequestCounterCountsCodesAndFailures: answered requests by method and
// status code, refused ones with an empty code, under the component label.
func TestRequestCounterCountsCodesAndFailures(t *testing.T) {
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.Method == http.MethodPatch {
			w.WriteHeader(http.StatusConflict)
		}
	}))
	defer srv.Close()
	reg := prometheus.NewRegistry()
	wrap, err := RequestCounter(reg, "agent")
	if err != nil {
		t.Fatal(err)
	}
	rt := wrap(http.DefaultTransport)
	for _, m := range []string{http.MethodGet, http.MethodGet, http.MethodPatch} {
		req, _ := http.NewRequest(m, srv.URL, nil)
		resp, err := rt.RoundTrip(req)
		if err != nil {
			t.Fatal(err)
		}
		resp.Body.Close()
	}
	refused := wrap(roundTripperFunc(func(*http.Request) (*http.Response, error) { return nil, errors.New("connection refused") }))
	req, _ := http.NewRequest(http.MethodPut, srv.URL, nil)
	if _, err := refused.RoundTrip(req); err == nil {
		t.Fatal("want the transport's error")
	}
	want := `
# HELP nodeward_api_requests_total Requests sent to the Kubernetes API server, by HTTP method and response code (code is empty when no response came).
# TYPE nodeward_api_requests_total counter
nodeward_api_requests_total{code="200",component="agent",method="get"} 2
nodeward_api_requests_total{code="409",component="agent",method="patch"} 1
nodeward_api_requests_total{code="",component="agent",method="put"} 1
`
	if err := testutil.GatherAndCompare(reg, strings.NewReader(want)); err != nil {
		t.Fatal(err)
	}
}

type roundTripperFunc func(*http.Request) (*http.Response, error)

func (f roundTripperFunc) RoundTrip(r *http.Request) (*http.Response, error) { return f(r) }

// TestRuntimeMetrics: go_*, process_* and nodeward_build_info on one
// registry, and a second registration refused (one per registry).
func TestRuntimeMetrics(t *testing.T) {
	reg := prometheus.NewRegistry()
	if err := RegisterRuntimeMetrics(reg, BuildInfo{Version: "v1.2.3", Commit: "abc"}); err != nil {
		t.Fatal(err)
	}
	want := `
# HELP nodeward_build_info A metric with a constant 1 labelled by the version, commit and Go version nodeward was built from.
# TYPE nodeward_build_info gauge
nodeward_build_info{commit="abc",goversion="` + runtime.Version() + `",version="v1.2.3"} 1
`
	if err := testutil.GatherAndCompare(reg, strings.NewReader(want), "nodeward_build_info"); err != nil {
		t.Fatal(err)
	}
	families, err := reg.Gather()
	if err != nil {
		t.Fatal(err)
	}
	names := map[string]bool{}
	for _, f := range families {
		names[f.GetName()] = true
	}
	for _, n := range []string{"go_goroutines", "go_memstats_alloc_bytes", "process_resident_memory_bytes", "process_cpu_seconds_total"} {
		if !names[n] && (runtime.GOOS == "linux" || strings.HasPrefix(n, "go_")) {
			t.Errorf("%s missing", n)
		}
	}
	if err := RegisterRuntimeMetrics(reg, BuildInfo{}); err == nil {
		t.Error("registering twice on one registry: want an error")
	}
}
