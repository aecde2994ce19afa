package kube

import (
	"cmp"
	"fmt"
	"net/http"
	"runtime"
	"strings"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/collectors"
	"github.com/prometheus/client_golang/prometheus/promhttp"
)

// RequestCounter counts every request a component sends to the API server
// in nodeward_api_requests_total{component,method,code}, so failures show
// as well as the load. Wrap a rest.Config with it before building clients.
func RequestCounter(reg prometheus.Registerer, component string) (func(http.RoundTripper) http.RoundTripper, error) {
	requests := prometheus.NewCounterVec(prometheus.CounterOpts{
		Name:        "nodeward_api_requests_total",
		Help:        "Requests sent to the Kubernetes API server, by HTTP method and response code (code is empty when no response came).",
		ConstLabels: prometheus.Labels{"component": component},
	}, []string{"method", "code"})
	if err := reg.Register(requests); err != nil {
		return nil, err
	}
	return func(rt http.RoundTripper) http.RoundTripper {
		counted := promhttp.InstrumentRoundTripperCounter(requests, rt)
		return promhttp.RoundTripperFunc(func(req *http.Request) (*http.Response, error) {
			resp, err := counted.RoundTrip(req)
			if err != nil {
				// promhttp counts only answered requests; a refused
				// connection is the failure an operator most needs to see.
				requests.WithLabelValues(strings.ToLower(req.Method), "").Inc()
			}
			return resp, err
		})
	}, nil
}

// BuildInfo names the build a component runs, for nodeward_build_info.
type BuildInfo struct {
	Version string
	Commit  string
}

// RegisterRuntimeMetrics registers what every nodeward process exposes
// besides its own metrics: the Go runtime (go_*), the process (process_*:
// resident memory, CPU, file descriptors) and nodeward_build_info, a gauge
// of 1 labelled with the version, commit and Go version.
func RegisterRuntimeMetrics(reg prometheus.Registerer, b BuildInfo) error {
	info := prometheus.NewGauge(prometheus.GaugeOpts{
		Name: "nodeward_build_info",
		Help: "A metric with a constant 1 labelled by the version, commit and Go version nodeward was built from.",
		ConstLabels: prometheus.Labels{
			"version": cmp.Or(b.Version, "dev"), "commit": cmp.Or(b.Commit, "unknown"), "goversion": runtime.Version(),
		},
	})
	info.Set(1)
	for _, c := range []prometheus.Collector{
		collectors.NewGoCollector(),
		collectors.NewProcessCollector(collectors.ProcessCollectorOpts{}),
		info,
	} {
		if err := reg.Register(c); err != nil {
			return fmt.Errorf("register runtime metrics: %w", err)
		}
	}
	return nil
}
