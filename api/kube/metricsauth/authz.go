// Package metricsauth serves nodeward's /metrics behind Kubernetes
// authentication and authorization, as kube-rbac-proxy and
// controller-runtime's filters.WithAuthenticationAndAuthorization do, so
// that neither the agent nor the coordinator needs a proxy sidecar: the
// scraper's bearer token is checked with a TokenReview
// (authentication.k8s.io/v1), its user with a SubjectAccessReview
// (authorization.k8s.io/v1) for get on the non-resource URL of the request
// (/metrics). Decisions are cached for a short while, so a scrape every 15
// s costs an API call only once per TTL. The server speaks TLS with the
// given certificate or one generated in memory at start (tls.go).
//
// The package is a leaf: it links nothing of nodeward, and both the agent
// (package daemon) and the coordinator (cmd/nodeward) use it.
package metricsauth

import (
	"context"
	"crypto/sha256"
	"errors"
	"log/slog"
	"net/http"
	"strings"
	"time"

	"k8s.io/client-go/rest"
)

// Defaults of Options.
const (
	DefaultAllowTTL  = 2 * time.Minute
	DefaultDenyTTL   = 10 * time.Second
	DefaultCacheSize = 1024
	// reviewTimeout bounds the two reviews of one request.
	reviewTimeout = 10 * time.Second
)

// Options tune an Authorizer; zero values take the defaults.
type Options struct {
	// AllowTTL is how long an allowed token is remembered; DenyTTL an
	// unauthenticated or forbidden one.
	AllowTTL, DenyTTL time.Duration
	// CacheSize bounds the remembered decisions.
	CacheSize int
	// Audiences of the TokenReview; empty means the API server's.
	Audiences []string
	Log       *slog.Logger
	// Now is the cache's clock; time.Now when nil.
	Now func() time.Time
}

// Authorizer checks requests against the API server.
type Authorizer struct {
	reviews *reviewer
	cache   *cache
	opts    Options
}

// New returns an Authorizer that reviews through cfg; its identity needs
// create on tokenreviews and subjectaccessreviews (the ClusterRole
// system:auth-delegator).
func New(cfg *rest.Config, opts Options) (*Authorizer, error) {
	if cfg == nil {
		return nil, errors.New("metrics auth: no API server configuration")
	}
	if opts.AllowTTL <= 0 {
		opts.AllowTTL = DefaultAllowTTL
	}
	if opts.DenyTTL <= 0 {
		opts.DenyTTL = DefaultDenyTTL
	}
	if opts.CacheSize <= 0 {
		opts.CacheSize = DefaultCacheSize
	}
	if opts.Log == nil {
		opts.Log = slog.Default()
	}
	if opts.Now == nil {
		opts.Now = time.Now
	}
	r, err := newReviewer(cfg)
	if err != nil {
		return nil, err
	}
	return &Authorizer{reviews: r, cache: newCache(opts.CacheSize), opts: opts}, nil
}

// Wrap returns h behind authentication and authorization: 401 without a
// bearer token or with one the API server does not accept, 403 when its
// user may not get the path, 503 when the API server cannot tell.
func (a *Authorizer) Wrap(h http.Handler) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.Method != http.MethodGet && r.Method != http.MethodHead {
			w.Header().Set("Allow", "GET, HEAD")
			http.Error(w, "method not allowed", http.StatusMethodNotAllowed)
			return
		}
		token, ok := bearerToken(r)
		if !ok {
			unauthorized(w)
			return
		}
		status := a.decide(r.Context(), token, r.URL.Path)
		switch status {
		case http.StatusOK:
			h.ServeHTTP(w, r)
		case http.StatusUnauthorized:
			unauthorized(w)
		default:
			http.Error(w, http.StatusText(status), status)
		}
	})
}

// decide returns the HTTP status for token on path: from the cache, or
// from a TokenReview and a SubjectAccessReview. Failures of the API server
// are not cached.
func (a *Authorizer) decide(ctx context.Context, token, path string) int {
	key := sha256.Sum256([]byte(path + "\x00" + token))
	if status, ok := a.cache.get(key, a.opts.Now()); ok {
		return status
	}
	ctx, cancel := context.WithTimeout(ctx, reviewTimeout)
	defer cancel()
	status, err := a.review(ctx, token, path)
	if err != nil {
		a.opts.Log.Warn("metrics request not reviewed", "path", path, "err", err)
		return http.StatusServiceUnavailable
	}
	ttl := a.opts.DenyTTL
	if status == http.StatusOK {
		ttl = a.opts.AllowTTL
	}
	a.cache.put(key, status, a.opts.Now().Add(ttl))
	return status
}

func (a *Authorizer) review(ctx context.Context, token, path string) (int, error) {
	user, err := a.reviews.authenticate(ctx, token, a.opts.Audiences)
	if err != nil {
		return 0, err
	}
	if user == nil {
		return http.StatusUnauthorized, nil
	}
	allowed, err := a.reviews.authorize(ctx, user, "get", path)
	if err != nil {
		return 0, err
	}
	if !allowed {
		a.opts.Log.Info("metrics request forbidden", "user", user.Username, "path", path)
		return http.StatusForbidden, nil
	}
	return http.StatusOK, nil
}

// bearerToken is the token of an "Authorization: Bearer" header.
func bearerToken(r *http.Request) (string, bool) {
	scheme, token, ok := strings.Cut(r.Header.Get("Authorization"), " ")
	if !ok || !strings.EqualFold(scheme, "Bearer") {
		return "", false
	}
	token = strings.TrimSpace(token)
	return token, token != ""
}

func unauthorized(w http.ResponseWriter) {
	w.Header().Set("WWW-Authenticate", `Bearer realm="nodeward metrics"`)
	http.Error(w, "Unauthorized", http.StatusUnauthorized)
}
