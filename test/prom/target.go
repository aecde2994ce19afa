package prom

import (
	"fmt"
	"net/http"
	"net/http/httptest"
	"sort"
	"strconv"
	"strings"
	"sync"
	"testing"
)

// Target is a scrape target: an HTTP server on the loopback whose /metrics
// serves, in Prometheus's text format, the gauges set on it.
type Target struct {
	srv *httptest.Server

	mu     sync.Mutex
	gauges map[string]map[string]float64 // name → rendered labels → value
}

// NewTarget starts a Target with no samples; t's cleanup stops it.
func NewTarget(t testing.TB) *Target {
	t.Helper()
	tg := &Target{gauges: map[string]map[string]float64{}}
	mux := http.NewServeMux()
	mux.HandleFunc("/metrics", tg.serve)
	tg.srv = httptest.NewServer(mux)
	t.Cleanup(tg.srv.Close)
	return tg
}

// Addr is the target's host:port, for PrometheusOptions.Targets.
func (tg *Target) Addr() string { return tg.srv.Listener.Addr().String() }

// Set sets the gauge sample name{labels} to v; Prometheus sees it at its
// next scrape.
func (tg *Target) Set(name string, labels map[string]string, v float64) {
	tg.mu.Lock()
	defer tg.mu.Unlock()
	if tg.gauges[name] == nil {
		tg.gauges[name] = map[string]float64{}
	}
	tg.gauges[name][renderLabels(labels)] = v
}

// Delete removes the sample name{labels}; at its next scrape Prometheus
// marks the series stale, and queries no longer return it.
func (tg *Target) Delete(name string, labels map[string]string) {
	tg.mu.Lock()
	defer tg.mu.Unlock()
	delete(tg.gauges[name], renderLabels(labels))
}

func (tg *Target) serve(w http.ResponseWriter, _ *http.Request) {
	tg.mu.Lock()
	var b strings.Builder
	names := make([]string, 0, len(tg.gauges))
	for n := range tg.gauges {
		names = append(names, n)
	}
	sort.Strings(names)
	for _, n := range names {
		fmt.Fprintf(&b, "# TYPE %s gauge\n", n)
		series := make([]string, 0, len(tg.gauges[n]))
		for ls := range tg.gauges[n] {
			series = append(series, ls)
		}
		sort.Strings(series)
		for _, ls := range series {
			fmt.Fprintf(&b, "%s%s %s\n", n, ls, strconv.FormatFloat(tg.gauges[n][ls], 'g', -1, 64))
		}
	}
	tg.mu.Unlock()
	w.Header().Set("Content-Type", "text/plain; version=0.0.4; charset=utf-8")
	_, _ = w.Write([]byte(b.String()))
}

// renderLabels writes labels as the text format does, sorted by name so
// that the same set is always the same key: {a="1",b="x\"y"}.
func renderLabels(labels map[string]string) string {
	if len(labels) == 0 {
		return ""
	}
	names := make([]string, 0, len(labels))
	for n := range labels {
		names = append(names, n)
	}
	sort.Strings(names)
	var b strings.Builder
	b.WriteByte('{')
	for i, n := range names {
		if i > 0 {
			b.WriteByte(',')
		}
		// The text format escapes backslash, double quote and newline
		// in label values, as a Go quoted string does for these.
		v := strings.NewReplacer(`\`, `\\`, `"`, `\"`, "\n", `\n`).Replace(labels[n])
		fmt.Fprintf(&b, `%s="%s"`, n, v)
	}
	b.WriteByte('}')
	return b.String()
}
