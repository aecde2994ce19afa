package daemon

import (
	"context"
	"errors"
	"fmt"
	"net"
	"net/http"
	"os"
	"path/filepath"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/promhttp"

	"github.com/nodeward/nodeward/conditions"
)

var errNodeNotSeen = errors.New("own Node not seen yet (does it exist, may the agent watch it?)")

type healthServer struct {
	listener net.Listener
	server   *http.Server
}

// listen opens the metrics address at once so that a taken port fails the
// start, not a goroutine later.
func (h *Health) listen(addr string) (*healthServer, error) {
	l, err := net.Listen("tcp", addr)
	if err != nil {
		return nil, fmt.Errorf("listen on metricsAddress %s: %w", addr, err)
	}
	mux := http.NewServeMux()
	mux.Handle("/metrics", promhttp.HandlerFor(h.cfg.Registry, promhttp.HandlerOpts{}))
	mux.HandleFunc("/healthz", func(w http.ResponseWriter, _ *http.Request) {
		fmt.Fprintln(w, "ok")
	})
	mux.HandleFunc("/readyz", func(w http.ResponseWriter, _ *http.Request) {
		ok, reason := h.Ready()
		if !ok {
			w.WriteHeader(http.StatusServiceUnavailable)
		}
		fmt.Fprintln(w, reason)
	})
	h.log.Info("serving metrics and health", "address", l.Addr().String())
	return &healthServer{listener: l, server: &http.Server{Handler: mux, ReadHeaderTimeout: 5 * time.Second}}, nil
}

// Addr is where the server listens (useful with port 0).
func (s *healthServer) Addr() string { return s.listener.Addr().String() }

func (s *healthServer) serve(ctx context.Context) {
	stop := context.AfterFunc(ctx, func() {
		shutdown, cancel := context.WithTimeout(context.Background(), 2*time.Second)
		defer cancel()
		s.server.Shutdown(shutdown)
	})
	defer stop()
	if err := s.server.Serve(s.listener); err != nil && !errors.Is(err, http.ErrServerClosed) {
		// The agent keeps publishing; only scraping is lost.
		fmt.Fprintln(os.Stderr, "nodeward: metrics server:", err)
	}
}

// writeTextfiles refreshes nodeward.prom for node_exporter's textfile
// collector; WriteToTextfile renames into place, so readers never see a
// half-written file.
func (h *Health) writeTextfiles(ctx context.Context, dir string) {
	path := filepath.Join(dir, "nodeward.prom")
	tick := time.NewTicker(15 * time.Second)
	defer tick.Stop()
	for {
		if err := prometheus.WriteToTextfile(path, h.cfg.Registry); err != nil {
			h.log.Warn("writing textfile metrics failed", "path", path, "err", err)
		}
		select {
		case <-ctx.Done():
			return
		case <-tick.C:
		}
	}
}

// countRequests counts every request the agent's client makes.
func countRequests(m *conditions.Metrics) func(http.RoundTripper) http.RoundTripper {
	return func(rt http.RoundTripper) http.RoundTripper {
		return roundTripFunc(func(req *http.Request) (*http.Response, error) {
			m.APIRequest(req.Method)
			return rt.RoundTrip(req)
		})
	}
}

type roundTripFunc func(*http.Request) (*http.Response, error)

func (f roundTripFunc) RoundTrip(req *http.Request) (*http.Response, error) { return f(req) }
