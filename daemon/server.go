package daemon

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"net/http"
	"path/filepath"
	"strings"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/promhttp"
	dto "github.com/prometheus/client_model/go"

	"github.com/nodeward/nodeward/api/kube/metricsauth"
)

// server serves the agent's /metrics, /livez (also /healthz) and /readyz.
type server struct {
	listener net.Listener
	server   *http.Server
	log      *slog.Logger
}

// listen opens addr at once so that a taken port fails the start, not a
// goroutine later. /readyz is the agent's combined readiness; /livez (and
// /healthz, its older name) its liveness, the same verdict the systemd
// watchdog follows.
// /metrics is behind the endpoint's authorization (metricsAuth); the probes
// are not, since the kubelet sends no token.
func listen(addr string, endpoint *metricsauth.Endpoint, gatherer prometheus.Gatherer, ready *Readiness, live *Liveness, log *slog.Logger) (*server, error) {
	l, err := net.Listen("tcp", addr)
	if err != nil {
		return nil, fmt.Errorf("listen on metricsAddress %s: %w", addr, err)
	}
	mux := http.NewServeMux()
	// Uncompressed: a gzip writer holds 0.8 MiB of tables (compress/flate's
	// compressor), kept between scrapes, for a page of a few tens of kB; the
	// agent's idle RSS is 1.4 MiB lower without it (docs/benchmarks.md).
	mux.Handle("/metrics", endpoint.Protect(promhttp.HandlerFor(gatherer, promhttp.HandlerOpts{DisableCompression: true})))
	livez := func(w http.ResponseWriter, _ *http.Request) {
		ok, reason := live.Alive()
		if !ok {
			w.WriteHeader(http.StatusServiceUnavailable)
		}
		fmt.Fprintln(w, reason)
	}
	mux.HandleFunc("/livez", livez)
	mux.HandleFunc("/healthz", livez)
	mux.Handle("/readyz", ready)
	log.Info("serving metrics and health", "address", l.Addr().String(), "scheme", endpoint.Scheme())
	return &server{listener: endpoint.Listener(l), log: log,
		server: &http.Server{Handler: mux, ReadHeaderTimeout: 5 * time.Second}}, nil
}

// Addr is where the server listens (useful with port 0).
func (s *server) Addr() string { return s.listener.Addr().String() }

func (s *server) serve(ctx context.Context) {
	stop := context.AfterFunc(ctx, func() {
		shutdown, cancel := context.WithTimeout(context.Background(), 2*time.Second)
		defer cancel()
		_ = s.server.Shutdown(shutdown)
	})
	defer stop()
	if err := s.server.Serve(s.listener); err != nil && !errors.Is(err, http.ErrServerClosed) {
		// The agent keeps working; only scraping is lost.
		s.log.Error("metrics server stopped", "err", err)
	}
}

// writeTextfiles refreshes nodeward.prom for node_exporter's textfile
// collector; WriteToTextfile renames into place, so readers never see a
// half-written file. Only nodeward_* metrics go there: node_exporter
// exposes its own go_* and process_*, and a duplicate fails its scrape.
func writeTextfiles(ctx context.Context, dir string, gatherer prometheus.Gatherer, log *slog.Logger) {
	path := filepath.Join(dir, "nodeward.prom")
	gatherer = nodewardOnly(gatherer)
	tick := time.NewTicker(15 * time.Second)
	defer tick.Stop()
	for {
		if err := prometheus.WriteToTextfile(path, gatherer); err != nil {
			log.Warn("writing textfile metrics failed", "path", path, "err", err)
		}
		select {
		case <-ctx.Done():
			return
		case <-tick.C:
		}
	}
}

// nodewardOnly gathers the nodeward_* families of g.
func nodewardOnly(g prometheus.Gatherer) prometheus.Gatherer {
	return prometheus.GathererFunc(func() ([]*dto.MetricFamily, error) {
		families, err := g.Gather()
		out := families[:0]
		for _, f := range families {
			if strings.HasPrefix(f.GetName(), "nodeward_") {
				out = append(out, f)
			}
		}
		return out, err
	})
}
