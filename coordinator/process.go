package coordinator

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"net/http"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/promhttp"
	"k8s.io/client-go/dynamic"
	"k8s.io/client-go/rest"

	"github.com/nodeward/nodeward/api/kube"
	"github.com/nodeward/nodeward/api/kube/metricsauth"
)

// ProcessConfig wires the `nodeward coordinator` process, as daemon.Config
// wires the agent's: one counted API client, the metrics registry and its
// endpoint, and leader election. The command line only parses flags into
// it.
type ProcessConfig struct {
	// RestConfig reaches the API server; the process counts every request
	// in nodeward_api_requests_total and sets its own rate limits.
	RestConfig *rest.Config
	Log        *slog.Logger
	// BuildInfo labels nodeward_build_info.
	BuildInfo kube.BuildInfo
	// Resync, PoolLabelSelector and SyncWarningInterval are Config's.
	Resync              time.Duration
	PoolLabelSelector   string
	SyncWarningInterval time.Duration
	// MetricsAddress serves /metrics (behind MetricsAuth), /readyz and
	// /healthz; empty serves nothing.
	MetricsAddress string
	MetricsAuth    metricsauth.Config
	// Leader elects a leader on LeaderLeaseName before granting; nil runs
	// without election (one replica only).
	Leader *LeaderConfig
}

// Process is a configured coordinator process; Run runs it.
type Process struct {
	cfg      ProcessConfig
	config   Config
	listener net.Listener
	endpoint *metricsauth.Endpoint
	registry *prometheus.Registry
}

// The coordinator's client rate limits. Every grant costs a few writes
// (grant, release, Events, a throttled status); at client-go's default 5
// QPS, or even 50, the client's own rate limiter, not the API server,
// would set the pace of a large rollout.
const (
	processQPS   = 200
	processBurst = 400
)

// NewProcess builds the process: its registry, its counted client and, when
// MetricsAddress is set, its listener, so that a taken address fails here,
// before any leadership is sought.
func NewProcess(cfg ProcessConfig) (*Process, error) {
	if cfg.RestConfig == nil {
		return nil, errors.New("coordinator: no API server configuration")
	}
	if cfg.Resync <= 0 {
		return nil, fmt.Errorf("resync %s: must be positive", cfg.Resync)
	}
	if cfg.Log == nil {
		cfg.Log = slog.Default()
	}
	p := &Process{cfg: cfg, registry: prometheus.NewRegistry()}
	metrics := NewMetrics(p.registry)
	if err := kube.RegisterRuntimeMetrics(p.registry, cfg.BuildInfo); err != nil {
		return nil, err
	}
	count, err := kube.RequestCounter(p.registry, "coordinator")
	if err != nil {
		return nil, fmt.Errorf("register API request metrics: %w", err)
	}
	rc := rest.CopyConfig(cfg.RestConfig)
	rc.Wrap(count)
	rc.QPS, rc.Burst = processQPS, processBurst
	client, err := kube.NewForConfig(rc)
	if err != nil {
		return nil, fmt.Errorf("create Kubernetes client: %w", err)
	}
	dyn, err := dynamic.NewForConfig(rc)
	if err != nil {
		return nil, fmt.Errorf("create dynamic client: %w", err)
	}
	p.config = Config{Client: client, Dynamic: dyn, Log: cfg.Log, Resync: cfg.Resync, Metrics: metrics,
		PoolLabelSelector: cfg.PoolLabelSelector, Progress: NewProgress(nil), SyncWarningInterval: cfg.SyncWarningInterval}
	if cfg.MetricsAddress != "" {
		// Reviews go through rc, the counted client configuration.
		if p.endpoint, err = metricsauth.Setup(cfg.MetricsAuth, rc, cfg.Log); err != nil {
			return nil, err
		}
		if p.listener, err = net.Listen("tcp", cfg.MetricsAddress); err != nil {
			return nil, fmt.Errorf("metrics address %s: %w", cfg.MetricsAddress, err)
		}
	}
	return p, nil
}

// Run serves the metrics endpoint and runs the coordinator, leader-elected
// when configured, until ctx ends (nil) or leadership is lost (an error).
func (p *Process) Run(ctx context.Context) error {
	if p.listener != nil {
		p.serve()
	}
	if p.cfg.Leader == nil {
		return New(p.config).Run(ctx)
	}
	err := RunWithLeaderElection(ctx, p.config, *p.cfg.Leader)
	if errors.Is(err, ctx.Err()) {
		return nil
	}
	return err
}

// serve serves /metrics (behind the endpoint's guard), /readyz (a standby
// waiting for the Lease, or a leader with synced caches) and /healthz
// (election attempts, the resync ticker and reconciles make progress); the
// probes need no token.
func (p *Process) serve() {
	progress := p.config.Progress
	mux := http.NewServeMux()
	mux.Handle("/metrics", p.endpoint.Protect(promhttp.HandlerFor(p.registry, promhttp.HandlerOpts{})))
	mux.HandleFunc("/readyz", progress.ServeReadyz)
	mux.HandleFunc("/healthz", progress.ServeHealthz)
	p.cfg.Log.Info("serving metrics and health", "address", p.listener.Addr().String(), "scheme", p.endpoint.Scheme())
	srv := &http.Server{Handler: mux, ReadHeaderTimeout: 5 * time.Second}
	go func() {
		if err := srv.Serve(p.endpoint.Listener(p.listener)); err != nil {
			p.cfg.Log.Error("metrics server stopped", "err", err)
		}
	}()
}
