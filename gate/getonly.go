package gate

import (
	"io"
	"net/http"
	"strings"
)

// getOnly sends the Prometheus client's form POSTs as GETs with the form
// as the query string. Prometheus's client asks queries by POST first;
// behind kube-rbac-proxy (OpenShift's thanos-querier) a POST is authorized
// as the verb create, which a reader's ServiceAccount lacks, so every
// query was refused with 403 and asked again by GET: two requests, and a
// denial in the proxy's log, for each (TestQueriesAskByGET saw it). The
// cluster version operator asks by GET for the same reason. Prometheus
// answers both alike.
type getOnly struct{ next http.RoundTripper }

// withGetOnly is client with its transport wrapped by getOnly; client is
// not changed.
func withGetOnly(client *http.Client) *http.Client {
	c := *client
	next := c.Transport
	if next == nil {
		next = http.DefaultTransport
	}
	c.Transport = getOnly{next: next}
	return &c
}

func (g getOnly) RoundTrip(req *http.Request) (*http.Response, error) {
	if req.Method != http.MethodPost || req.Body == nil ||
		!strings.HasPrefix(req.Header.Get("Content-Type"), "application/x-www-form-urlencoded") {
		return g.next.RoundTrip(req)
	}
	form, err := io.ReadAll(req.Body)
	_ = req.Body.Close()
	if err != nil {
		return nil, err
	}
	get := req.Clone(req.Context())
	get.Method, get.Body, get.GetBody, get.ContentLength = http.MethodGet, nil, nil, 0
	get.Header.Del("Content-Type")
	u := *req.URL
	u.RawQuery = joinQuery(u.RawQuery, string(form))
	get.URL = &u
	return g.next.RoundTrip(get)
}

func joinQuery(a, b string) string {
	switch {
	case a == "":
		return b
	case b == "":
		return a
	}
	return a + "&" + b
}
