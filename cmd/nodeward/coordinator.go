package main

import (
	"fmt"
	"os"
	"time"

	"github.com/google/uuid"
	"github.com/spf13/cobra"

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
			auth, err := metricsAuth.config()
			if err != nil {
				return err
			}
			pc := coordinator.ProcessConfig{RestConfig: cfg, Log: g.logger, BuildInfo: buildInfo(), Resync: resync,
				PoolLabelSelector: poolSelector, SyncWarningInterval: syncWarn, MetricsAddress: metricsAddr, MetricsAuth: auth}
			if leaderElect {
				if !cmd.Flags().Changed("leader-election-namespace") && cmd.Flags().Changed("namespace") {
					leaderNS = conn.overrides.Context.Namespace
				}
				// Unique per process, as the kube-controller-manager's: two
				// replicas on one host, or a restarted one, never share a
				// leadership.
				host, _ := os.Hostname()
				pc.Leader = &coordinator.LeaderConfig{Namespace: leaderNS, Identity: host + "_" + uuid.NewString(),
					LeaseDuration: leaseDuration, RenewDeadline: leaseDuration * 2 / 3, RetryPeriod: leaseDuration / 7}
			}
			process, err := coordinator.NewProcess(pc)
			if err != nil {
				return err
			}
			return process.Run(cmd.Context())
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
