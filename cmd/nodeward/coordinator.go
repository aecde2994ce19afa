package main

import (
	"errors"
	"fmt"
	"log/slog"
	"net"
	"net/http"
	"os"
	"time"

	"github.com/google/uuid"
	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/promhttp"
	"github.com/spf13/cobra"
	"k8s.io/client-go/dynamic"
	"k8s.io/client-go/rest"

	"github.com/nodeward/nodeward/api/kube"
	"github.com/nodeward/nodeward/api/kube/metricsauth"
	"github.com/nodeward/nodeward/coordinator"
)

func newCoordinatorCommand(g *globals) *cobra.Command {
	var (
		conn          kubeFlags
		leaderElect   bool
		leaderNS      string
		metricsAddr   string
		metricsAuth   metricsFlags
		poolSelector  string
		resync        time.Duration
		leaseDuration time.Duration
		syncWarn      time.Duration
	)
	cmd := &cobra.Command{
		Use:   "coordinator",
		Short: "Run the update coordinator: grant slots under maxUnavailable",
		Long: "Run the update coordinator until SIGTERM: grant update slots to the nodes of every UpdatePool\n" +
			"under its maxUnavailable, leader-elected so that replicas never grant concurrently." +
			exitCodesHelp("0 stopped by SIGTERM or SIGINT", "1 failed (the metrics address is taken, leadership was lost, …)"),
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			if resync <= 0 {
				return usageError(fmt.Errorf("--resync %s: must be positive", resync))
			}
			cfg, err := conn.restConfig()
			if err != nil {
				return err
			}
			reg := prometheus.NewRegistry()
			metrics := coordinator.NewMetrics(reg)
			if err := kube.RegisterRuntimeMetrics(reg, buildInfo()); err != nil {
				return err
			}
			count, err := kube.RequestCounter(reg, "coordinator")
			if err != nil {
				return fmt.Errorf("register API request metrics: %w", err)
			}
			cfg.Wrap(count)
			// Every grant costs a few writes (grant, release, Events, a
			// throttled status); at client-go's default 5 QPS, or even 50,
			// the client's own rate limiter, not the API server, would set
			// the pace of a large rollout.
			cfg.QPS, cfg.Burst = 200, 400
			client, err := kube.NewForConfig(cfg)
			if err != nil {
				return fmt.Errorf("create Kubernetes client: %w", err)
			}
			dyn, err := dynamic.NewForConfig(cfg)
			if err != nil {
				return fmt.Errorf("create dynamic client: %w", err)
			}
			log := g.logger
			health := coordinator.NewHealth(nil)
			opts := coordinator.Options{Client: client, Dynamic: dyn, Log: log, Resync: resync,
				Metrics: metrics, PoolLabelSelector: poolSelector, Health: health,
				SyncWarningInterval: syncWarn}
			auth, err := metricsAuth.config()
			if err != nil {
				return err
			}
			if err := serveMetrics(metricsAddr, auth, cfg, reg, health, log); err != nil {
				return err
			}
			if !cmd.Flags().Changed("leader-election-namespace") && cmd.Flags().Changed("namespace") {
				leaderNS = conn.overrides.Context.Namespace
			}
			ctx := cmd.Context()
			if !leaderElect {
				return coordinator.New(opts).Run(ctx)
			}
			// Unique per process, as the kube-controller-manager's: two
			// replicas on one host, or a restarted one, never share a
			// leadership.
			host, _ := os.Hostname()
			identity := host + "_" + uuid.NewString()
			err = coordinator.RunWithLeaderElection(ctx, opts, coordinator.LeaderOptions{
				Namespace: leaderNS, Identity: identity, LeaseDuration: leaseDuration,
				RenewDeadline: leaseDuration * 2 / 3, RetryPeriod: leaseDuration / 7,
			})
			if errors.Is(err, ctx.Err()) {
				return nil
			}
			return err
		},
	}
	conn.register(cmd, true)
	f := cmd.Flags()
	f.BoolVar(&leaderElect, "leader-elect", true, "elect a leader on the Lease "+coordinator.LeaderLeaseName+" so replicas never grant concurrently")
	f.StringVar(&leaderNS, "leader-election-namespace", "nodeward-system", "namespace of the leader Lease (-n/--namespace sets it too when this flag is not given)")
	f.DurationVar(&leaseDuration, "leader-lease-duration", 15*time.Second, "how long a leader's Lease is valid without renewal")
	f.StringVar(&metricsAddr, "metrics-address", "127.0.0.1:9741", "address of /metrics, /readyz and /healthz (empty disables)")
	metricsAuth.register(cmd, string(metricsauth.None))
	f.StringVar(&poolSelector, "pool-selector", "", "label selector of the UpdatePools this coordinator manages (default all)")
	registerSyncWarning(cmd, &syncWarn)
	f.DurationVar(&resync, "resync", 5*time.Second, "re-plan every pool this often (agent Lease expiry, maintenance windows)")
	return cmd
}

// serveMetrics serves /metrics (behind --metrics-auth), /readyz (a standby
// waiting for the Lease, or a leader with synced caches) and /healthz
// (election attempts, the resync ticker and reconciles make progress); the
// probes need no token. Reviews go through rc, the coordinator's counted
// client configuration.
func serveMetrics(addr string, auth metricsauth.Config, rc *rest.Config, reg *prometheus.Registry, health *coordinator.Health, log *slog.Logger) error {
	if addr == "" {
		return nil
	}
	endpoint, err := metricsauth.Setup(auth, rc, log)
	if err != nil {
		return err
	}
	ln, err := net.Listen("tcp", addr)
	if err != nil {
		return fmt.Errorf("--metrics-address %s: %w", addr, err)
	}
	mux := http.NewServeMux()
	mux.Handle("/metrics", endpoint.Protect(promhttp.HandlerFor(reg, promhttp.HandlerOpts{})))
	mux.HandleFunc("/readyz", health.ServeReadyz)
	mux.HandleFunc("/healthz", health.ServeHealthz)
	log.Info("serving metrics and health", "address", ln.Addr().String(), "scheme", endpoint.Scheme())
	srv := &http.Server{Handler: mux, ReadHeaderTimeout: 5 * time.Second}
	go func() {
		if err := srv.Serve(endpoint.Listener(ln)); err != nil {
			log.Error("metrics server stopped", "err", err)
		}
	}()
	return nil
}
