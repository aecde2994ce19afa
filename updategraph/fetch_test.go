package updategraph

import (
	"context"
	"crypto/sha256"
	"encoding/json"
	"errors"
	"fmt"
	"net"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"
)

// graphService plays the Fedora CoreOS graph service on the snapshot: it
// builds the graph of the queried stream and architecture as
// fcos-graph-builder would, serves it with an entity tag, and records the
// queries it got.
type graphService struct {
	tb       testing.TB
	requests atomic.Int64
	mu       sync.Mutex
	queries  []string
	accepts  []string
	bodies   map[string][]byte
}

func newGraphService(tb testing.TB) *graphService {
	return &graphService{tb: tb, bodies: map[string][]byte{}}
}

func (s *graphService) body(stream, arch string) ([]byte, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	key := stream + "/" + arch
	if b, ok := s.bodies[key]; ok {
		return b, nil
	}
	switch stream {
	case "stable", "testing", "next":
	default:
		return nil, fmt.Errorf("unknown stream %q", stream)
	}
	b, err := json.Marshal(fcosGraph(s.tb, stream, Scope{Arch: arch}))
	s.bodies[key] = b
	return b, err
}

func (s *graphService) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	s.requests.Add(1)
	s.mu.Lock()
	s.queries = append(s.queries, r.URL.RawQuery)
	s.accepts = append(s.accepts, r.Header.Get("Accept"))
	s.mu.Unlock()
	body, err := s.body(r.URL.Query().Get("stream"), r.URL.Query().Get("basearch"))
	if err != nil {
		w.WriteHeader(http.StatusBadRequest)
		_, _ = fmt.Fprintf(w, `{"kind":"invalid_scope","value":%q}`, err.Error())
		return
	}
	etag := fmt.Sprintf(`"%x"`, sha256.Sum256(body))
	if r.Header.Get("If-None-Match") == etag {
		w.WriteHeader(http.StatusNotModified)
		return
	}
	w.Header().Set("ETag", etag)
	w.Header().Set("Content-Type", "application/json")
	_, _ = w.Write(body)
}

// fakeClock is the Fetcher's clock, moved by the test.
type fakeClock struct {
	mu  sync.Mutex
	now time.Time
}

func (c *fakeClock) Now() time.Time { c.mu.Lock(); defer c.mu.Unlock(); return c.now }
func (c *fakeClock) Advance(d time.Duration) {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.now = c.now.Add(d)
}

func newFetcher(t *testing.T, url string, clock *fakeClock, timeout time.Duration) *Fetcher {
	t.Helper()
	f, err := NewFetcher(Source{URL: url + "/v1/graph", Dialect: FedoraCoreOS, Channel: "stable", Arch: "x86_64"},
		FetchConfig{Timeout: timeout, MinBackoff: 10 * time.Second, MaxBackoff: 40 * time.Second, Now: clock.Now})
	if err != nil {
		t.Fatal(err)
	}
	return f
}

func TestFetchGood(t *testing.T) {
	service := newGraphService(t)
	server := httptest.NewServer(service)
	defer server.Close()
	clock := &fakeClock{now: rolloutHalf}
	f := newFetcher(t, server.URL, clock, 5*time.Second)

	snap, err := f.Fetch(context.Background())
	if err != nil {
		t.Fatal(err)
	}
	if len(snap.Graph.Releases) != 179 || snap.ETag == "" || !snap.FetchedAt.Equal(rolloutHalf) {
		t.Fatalf("snapshot: %d releases, ETag %q, fetched at %s", len(snap.Graph.Releases), snap.ETag, snap.FetchedAt)
	}
	if q := service.queries[0]; q != "basearch=x86_64&rollout_wariness=0&stream=stable" || service.accepts[0] != "application/json" {
		t.Errorf("query %q, Accept %q", q, service.accepts[0])
	}
	hops, err := NextHops(snap.Graph, on("43.20260413.3.2", "n1"), Policy{Wariness: 0.5, Now: clock.Now()})
	if next, ok := hops.Next(); err != nil || !ok || next.Release.Version != "44.20260707.3.1" {
		t.Errorf("next hop over the fetched graph: %+v, %v", next, err)
	}

	// Again: the service answers 304 and the same graph is kept, fetched
	// at the new time.
	clock.Advance(time.Minute)
	again, err := f.Fetch(context.Background())
	if err != nil || again.Graph != snap.Graph || !again.FetchedAt.Equal(rolloutHalf.Add(time.Minute)) {
		t.Errorf("second fetch: same graph %v, fetched at %s, %v", again.Graph == snap.Graph, again.FetchedAt, err)
	}
	if service.requests.Load() != 2 {
		t.Errorf("%d requests, want 2", service.requests.Load())
	}
}

func TestFetchOpenShiftQuery(t *testing.T) {
	var query, accept string
	server := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		query, accept = r.URL.RawQuery, r.Header.Get("Accept")
		_, _ = w.Write(readTestdata(t, "openshift/graph.json"))
	}))
	defer server.Close()
	f, err := NewFetcher(Source{URL: server.URL + "/api/upgrades_info/graph?id=abc", Dialect: OpenShift, Channel: "stable-4.18", Arch: "amd64"}, FetchConfig{})
	if err != nil {
		t.Fatal(err)
	}
	snap, err := f.Fetch(context.Background())
	if err != nil || len(snap.Graph.ConditionalEdges) != 4 {
		t.Fatalf("fetch: %v", err)
	}
	if query != "arch=amd64&channel=stable-4.18&id=abc" || accept != "application/json" {
		t.Errorf("query %q, Accept %q", query, accept)
	}
}

// TestFetchFailsClosed: a slow, down, failing or garbage-serving service
// is an error saying why, the last good graph stays as it was, and the
// Fetcher backs off before asking again.
func TestFetchFailsClosed(t *testing.T) {
	good := readTestdata(t, "openshift/graph.json")
	release := make(chan struct{})
	defer close(release)
	cases := []struct {
		name    string
		handler http.HandlerFunc
		down    bool
		reason  string
		message string
	}{
		{"slow", func(w http.ResponseWriter, r *http.Request) {
			select {
			case <-r.Context().Done():
			case <-release:
			}
		}, false, ReasonRemoteFailed, "timed out after 200ms"},
		{"down", nil, true, ReasonRemoteFailed, "connection refused"},
		{"HTTP 500 with the service's error", func(w http.ResponseWriter, r *http.Request) {
			w.WriteHeader(http.StatusInternalServerError)
			_, _ = w.Write([]byte(`{"kind":"upstream_unavailable","value":"the graph builder is not ready"}`))
		}, false, ReasonResponseFailed, "HTTP 500 Internal Server Error: upstream_unavailable: the graph builder is not ready"},
		{"garbage", func(w http.ResponseWriter, r *http.Request) {
			_, _ = w.Write([]byte("<html>maintenance</html>"))
		}, false, ReasonResponseInvalid, "graph: invalid JSON at byte 1"},
		{"a field wrong", func(w http.ResponseWriter, r *http.Request) {
			_, _ = w.Write([]byte(strings.Replace(string(good), `"payload": "quay.io`, `"payload": 7, "x": "quay.io`, 1)))
		}, false, ReasonResponseInvalid, "nodes[0].payload: a JSON number"},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			serveGood := atomic.Bool{}
			serveGood.Store(true)
			var requests atomic.Int64
			server := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
				requests.Add(1)
				if serveGood.Load() {
					_, _ = w.Write(good)
					return
				}
				c.handler(w, r)
			}))
			defer server.Close()
			clock := &fakeClock{now: time.Date(2026, 11, 28, 3, 0, 0, 0, time.UTC)}
			f := newFetcher(t, server.URL, clock, 200*time.Millisecond)
			first, err := f.Fetch(context.Background())
			if err != nil {
				t.Fatal(err)
			}
			serveGood.Store(false)
			if c.down {
				server.Close()
			}
			clock.Advance(time.Hour)
			start := time.Now()
			_, err = f.Fetch(context.Background())
			assertFetchError(t, err, c.reason, c.message)
			if took := time.Since(start); took > 5*time.Second {
				t.Errorf("the failing fetch took %s", took)
			}
			if last, ok := f.Last(); !ok || last.Graph != first.Graph || !last.FetchedAt.Equal(first.FetchedAt) {
				t.Errorf("the last good graph changed: %+v", last)
			}
			assertBacksOff(t, f, clock, &requests)
		})
	}
}

func assertFetchError(t *testing.T, err error, reason, message string) {
	t.Helper()
	var fe *FetchError
	if !errors.As(err, &fe) || fe.Reason != reason || !strings.Contains(err.Error(), message) {
		t.Fatalf("error %v; want a FetchError %s containing %q", err, reason, message)
	}
}

// assertBacksOff: right after a failure, a Fetch fails at once without a
// request; after the backoff (10s, then 20s, capped at 40s), it asks again.
func assertBacksOff(t *testing.T, f *Fetcher, clock *fakeClock, requests *atomic.Int64) {
	t.Helper()
	for _, wait := range []time.Duration{10 * time.Second, 20 * time.Second, 40 * time.Second, 40 * time.Second} {
		before := requests.Load()
		_, err := f.Fetch(context.Background())
		assertFetchError(t, err, ReasonBackingOff, "failures in a row")
		clock.Advance(wait - time.Second)
		_, err = f.Fetch(context.Background())
		assertFetchError(t, err, ReasonBackingOff, "failures in a row")
		if requests.Load() != before {
			t.Fatalf("a request while backing off")
		}
		clock.Advance(time.Second)
		_, err = f.Fetch(context.Background())
		var fe *FetchError
		if !errors.As(err, &fe) || fe.Reason == ReasonBackingOff || !fe.RetryAt.Equal(clock.Now().Add(min(2*wait, 40*time.Second))) {
			t.Fatalf("after %s: %v (retry at %v); want a new attempt, failing, and a doubled backoff", wait, err, fe.RetryAt)
		}
	}
}

func TestNewFetcherRefusesBadSources(t *testing.T) {
	cases := []struct {
		src  Source
		want string
	}{
		{Source{URL: "graph.example/v1", Dialect: OpenShift, Channel: "c", Arch: "amd64"}, "not an absolute http(s) URL"},
		{Source{URL: "ftp://graph.example/v1", Dialect: OpenShift, Channel: "c", Arch: "amd64"}, "not an absolute http(s) URL"},
		{Source{URL: "https://graph.example/v1", Dialect: OpenShift, Arch: "amd64"}, "a channel and an architecture are needed"},
		{Source{URL: "https://graph.example/v1", Dialect: "Omaha", Channel: "c", Arch: "amd64"}, `dialect "Omaha"`},
	}
	for _, c := range cases {
		if _, err := NewFetcher(c.src, FetchConfig{}); err == nil || !strings.Contains(err.Error(), c.want) {
			t.Errorf("%+v: %v; want %q", c.src, err, c.want)
		}
	}
}

// TestFetchRefusesAnOversizedGraph: a graph over MaxBytes is refused
// rather than read whole.
func TestFetchRefusesAnOversizedGraph(t *testing.T) {
	server := httptest.NewServer(newGraphService(t))
	defer server.Close()
	f, err := NewFetcher(Source{URL: server.URL, Dialect: FedoraCoreOS, Channel: "stable", Arch: "x86_64"}, FetchConfig{MaxBytes: 1024})
	if err != nil {
		t.Fatal(err)
	}
	_, err = f.Fetch(context.Background())
	assertFetchError(t, err, ReasonResponseInvalid, "over 1024 bytes")
}

// freePort is a loopback address nothing listens on.
func freePort(t *testing.T) string {
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	addr := l.Addr().String()
	_ = l.Close()
	return addr
}

func TestFetchUnknownStreamSaysWhy(t *testing.T) {
	server := httptest.NewServer(newGraphService(t))
	defer server.Close()
	f, err := NewFetcher(Source{URL: server.URL, Dialect: FedoraCoreOS, Channel: "rawhide", Arch: "x86_64"}, FetchConfig{})
	if err != nil {
		t.Fatal(err)
	}
	_, err = f.Fetch(context.Background())
	assertFetchError(t, err, ReasonResponseFailed, `HTTP 400 Bad Request: invalid_scope: unknown stream "rawhide"`)
	f2, _ := NewFetcher(Source{URL: "http://" + freePort(t), Dialect: FedoraCoreOS, Channel: "stable", Arch: "x86_64"}, FetchConfig{})
	_, err = f2.Fetch(context.Background())
	assertFetchError(t, err, ReasonRemoteFailed, "connection refused")
}

// TestFetchCanceledByTheCallerDoesNotBackOff: a fetch the caller ends is
// no failure of the service; Last answers while a fetch is in flight.
func TestFetchCanceledByTheCallerDoesNotBackOff(t *testing.T) {
	arrived := make(chan struct{}, 4)
	release := make(chan struct{})
	defer close(release)
	server := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		arrived <- struct{}{}
		select {
		case <-r.Context().Done():
		case <-release:
		}
	}))
	defer server.Close()
	clock := &fakeClock{now: time.Date(2026, 11, 28, 3, 0, 0, 0, time.UTC)}
	f := newFetcher(t, server.URL, clock, time.Minute)
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { _, err := f.Fetch(ctx); done <- err }()
	select {
	case <-arrived:
	case <-time.After(10 * time.Second):
		t.Fatal("the request never reached the server")
	}
	lastReturned := make(chan struct{})
	go func() { f.Last(); close(lastReturned) }()
	select {
	case <-lastReturned:
	case <-time.After(10 * time.Second):
		t.Fatal("Last waited for the fetch in flight")
	}
	cancel()
	select {
	case err := <-done:
		assertFetchError(t, err, ReasonRemoteFailed, "context canceled")
	case <-time.After(10 * time.Second):
		t.Fatal("the canceled fetch did not return")
	}
	// No backoff: the next fetch asks the service at once.
	ctx2, cancel2 := context.WithCancel(context.Background())
	go func() { _, err := f.Fetch(ctx2); done <- err }()
	select {
	case <-arrived:
	case err := <-done:
		t.Fatalf("the fetch after a canceled one did not ask the service: %v", err)
	case <-time.After(10 * time.Second):
		t.Fatal("the second request never reached the server")
	}
	cancel2()
	<-done
}
