package updategraph

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"net/url"
	"sync"
	"time"
)

// Dialect says which query a graph service expects.
type Dialect string

const (
	// OpenShift's update service: `channel` and `arch`.
	OpenShift Dialect = "OpenShift"
	// Fedora CoreOS's: `stream` and `basearch`, and `rollout_wariness=0`
	// so that the service hides no rollout (NextHops throttles with the
	// pool's own wariness).
	FedoraCoreOS Dialect = "FedoraCoreOS"
)

// Source is where a pool's graph comes from.
type Source struct {
	URL     string
	Dialect Dialect
	// Channel is OpenShift's channel or Fedora CoreOS's stream.
	Channel string
	// Arch is the architecture as the service names it (amd64 for
	// OpenShift, x86_64 for Fedora CoreOS).
	Arch string
}

// FetchConfig bounds a Fetcher. Zero fields take the defaults.
type FetchConfig struct {
	// Timeout bounds one request, body included (default 30s).
	Timeout time.Duration
	// MinBackoff is the wait after a first failure, doubled after each
	// further one up to MaxBackoff (defaults 10s and 10min).
	MinBackoff, MaxBackoff time.Duration
	// MaxBytes bounds the graph's size (default 32 MiB).
	MaxBytes int64
	// Now is the clock (default time.Now).
	Now func() time.Time
	// Transport is the HTTP transport (default http.DefaultTransport).
	Transport http.RoundTripper
}

func (c FetchConfig) withDefaults() FetchConfig {
	if c.Timeout <= 0 {
		c.Timeout = 30 * time.Second
	}
	if c.MinBackoff <= 0 {
		c.MinBackoff = 10 * time.Second
	}
	if c.MaxBackoff < c.MinBackoff {
		c.MaxBackoff = max(10*time.Minute, c.MinBackoff)
	}
	if c.MaxBytes <= 0 {
		c.MaxBytes = 32 << 20
	}
	if c.Now == nil {
		c.Now = time.Now
	}
	if c.Transport == nil {
		c.Transport = http.DefaultTransport
	}
	return c
}

// Snapshot is a graph as fetched: when, and the entity tag the service
// gave it.
type Snapshot struct {
	Graph     *Graph
	FetchedAt time.Time
	ETag      string
}

// The reasons of a FetchError, as the cluster version operator reports
// its RetrievedUpdates condition.
const (
	ReasonInvalidSource   = "InvalidSource"
	ReasonRemoteFailed    = "RemoteFailed"
	ReasonResponseFailed  = "ResponseFailed"
	ReasonResponseInvalid = "ResponseInvalid"
	ReasonBackingOff      = "BackingOff"
)

// FetchError says why no graph was fetched.
type FetchError struct {
	Reason string
	URL    string
	// RetryAt is when the Fetcher asks the service again.
	RetryAt time.Time
	Err     error
}

func (e *FetchError) Error() string {
	return fmt.Sprintf("fetching the update graph from %s: %s: %v", e.URL, e.Reason, e.Err)
}

func (e *FetchError) Unwrap() error { return e.Err }

// Fetcher gets one source's graph. It keeps the last good graph, asks with
// its entity tag (a 304 keeps it), and after a failure backs off
// exponentially: a Fetch before RetryAt fails at once with the last error.
// It is safe for concurrent use: fetches are serialized, and Last does not
// wait for one in flight.
type Fetcher struct {
	cfg    FetchConfig
	url    string
	client *http.Client

	// fetching serializes Fetch; mu guards the fields below it, and is
	// never held across a request.
	fetching sync.Mutex
	mu       sync.Mutex
	last     Snapshot
	failures int
	retryAt  time.Time
	lastErr  *FetchError
}

// NewFetcher checks the source and builds its Fetcher.
func NewFetcher(src Source, cfg FetchConfig) (*Fetcher, error) {
	u, err := queryURL(src)
	if err != nil {
		return nil, err
	}
	cfg = cfg.withDefaults()
	return &Fetcher{cfg: cfg, url: u, client: &http.Client{Transport: cfg.Transport}}, nil
}

func queryURL(src Source) (string, error) {
	u, err := url.Parse(src.URL)
	if err != nil || (u.Scheme != "http" && u.Scheme != "https") || u.Host == "" {
		return "", fmt.Errorf("update source URL %q: not an absolute http(s) URL", src.URL)
	}
	if src.Channel == "" || src.Arch == "" {
		return "", fmt.Errorf("update source %s: a channel and an architecture are needed", src.URL)
	}
	q := u.Query()
	switch src.Dialect {
	case OpenShift:
		q.Set("channel", src.Channel)
		q.Set("arch", src.Arch)
	case FedoraCoreOS:
		q.Set("stream", src.Channel)
		q.Set("basearch", src.Arch)
		q.Set("rollout_wariness", "0")
	default:
		return "", fmt.Errorf("update source %s: dialect %q is neither %s nor %s", src.URL, src.Dialect, OpenShift, FedoraCoreOS)
	}
	u.RawQuery = q.Encode()
	return u.String(), nil
}

// Last is the last good graph, if any: for the pool's status while the
// service fails. A caller that fails closed changes no target from it.
func (f *Fetcher) Last() (Snapshot, bool) {
	f.mu.Lock()
	defer f.mu.Unlock()
	return f.last, f.last.Graph != nil
}

// Fetch asks the service for the graph and returns it parsed, or a
// *FetchError saying why not. A fetch the caller's context ends is no
// failure of the service: it neither counts nor backs off.
func (f *Fetcher) Fetch(ctx context.Context) (Snapshot, error) {
	f.fetching.Lock()
	defer f.fetching.Unlock()
	now := f.cfg.Now()
	f.mu.Lock()
	last, lastErr, retryAt, failures := f.last, f.lastErr, f.retryAt, f.failures
	f.mu.Unlock()
	if lastErr != nil && now.Before(retryAt) {
		return Snapshot{}, &FetchError{Reason: ReasonBackingOff, URL: f.url, RetryAt: retryAt,
			Err: fmt.Errorf("%d failures in a row, the last: %w", failures, lastErr)}
	}
	snap, err := f.get(ctx, last)
	if err != nil && ctx.Err() != nil {
		return Snapshot{}, err
	}
	f.mu.Lock()
	defer f.mu.Unlock()
	if err != nil {
		f.failures++
		f.retryAt = now.Add(f.backoff())
		err.RetryAt = f.retryAt
		f.lastErr = err
		return Snapshot{}, err
	}
	f.failures, f.lastErr = 0, nil
	if snap.Graph == nil { // not modified
		snap.Graph, snap.ETag = last.Graph, last.ETag
	}
	snap.FetchedAt = now
	f.last = snap
	return snap, nil
}

// backoff is the wait after the failures so far: MinBackoff doubled per
// failure after the first, up to MaxBackoff.
func (f *Fetcher) backoff() time.Duration {
	wait := f.cfg.MinBackoff
	for i := 1; i < f.failures && wait < f.cfg.MaxBackoff; i++ {
		wait *= 2
	}
	return min(wait, f.cfg.MaxBackoff)
}

// get makes one request. A 304 returns a snapshot without a graph.
func (f *Fetcher) get(ctx context.Context, last Snapshot) (Snapshot, *FetchError) {
	fail := func(reason string, err error) (Snapshot, *FetchError) {
		return Snapshot{}, &FetchError{Reason: reason, URL: f.url, Err: err}
	}
	ctx, cancel := context.WithTimeout(ctx, f.cfg.Timeout)
	defer cancel()
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, f.url, nil)
	if err != nil {
		return fail(ReasonInvalidSource, err)
	}
	req.Header.Set("Accept", "application/json")
	if last.ETag != "" && last.Graph != nil {
		req.Header.Set("If-None-Match", last.ETag)
	}
	resp, err := f.client.Do(req)
	if err != nil {
		return fail(ReasonRemoteFailed, f.explain(ctx, err))
	}
	defer func() { _ = resp.Body.Close() }()
	switch resp.StatusCode {
	case http.StatusNotModified:
		return Snapshot{}, nil
	case http.StatusOK:
	default:
		return fail(ReasonResponseFailed, statusError(resp))
	}
	body, err := io.ReadAll(io.LimitReader(resp.Body, f.cfg.MaxBytes+1))
	if err != nil {
		return fail(ReasonResponseFailed, fmt.Errorf("reading the body: %w", f.explain(ctx, err)))
	}
	if int64(len(body)) > f.cfg.MaxBytes {
		return fail(ReasonResponseInvalid, fmt.Errorf("the graph is over %d bytes", f.cfg.MaxBytes))
	}
	g, err := Parse(body)
	if err != nil {
		return fail(ReasonResponseInvalid, err)
	}
	return Snapshot{Graph: g, ETag: resp.Header.Get("ETag")}, nil
}

// explain names a timeout as one: the transport's own error says only that
// a context deadline passed.
func (f *Fetcher) explain(ctx context.Context, err error) error {
	if errors.Is(ctx.Err(), context.DeadlineExceeded) {
		return fmt.Errorf("timed out after %s: %w", f.cfg.Timeout, err)
	}
	return err
}

// statusError reads the service's error ({"kind", "value"}) if it sent one.
func statusError(resp *http.Response) error {
	var body struct {
		Kind  string `json:"kind"`
		Value string `json:"value"`
	}
	data, _ := io.ReadAll(io.LimitReader(resp.Body, 64<<10))
	if json.Unmarshal(data, &body) == nil && body.Kind != "" {
		return fmt.Errorf("HTTP %s: %s: %s", resp.Status, body.Kind, body.Value)
	}
	return fmt.Errorf("HTTP %s", resp.Status)
}
