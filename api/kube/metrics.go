package kube

import (
	"net/http"
	"strings"

	"github.com/prometheus/client_golang/prometheus"
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
