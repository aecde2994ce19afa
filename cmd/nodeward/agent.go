package main

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"os"
	"time"

	"github.com/spf13/cobra"

	"github.com/nodeward/nodeward/api/kube"
	"github.com/nodeward/nodeward/conditions"
	"github.com/nodeward/nodeward/daemon"
)

func newAgentCommand() *cobra.Command {
	var (
		conn       kubeFlags
		flags      healthFlags
		drainFlags agentDrainFlags
		host       hostFlags
		nodeName   string
		updates    bool
		protocol   string
		stateDir   string
	)
	cmd := &cobra.Command{
		Use:   "agent",
		Short: "Run the node agent: health conditions, taints and coordinated OS updates",
		Args:  cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			if protocol != "nodeward" && protocol != "mco" {
				return fmt.Errorf("--protocol %q: want nodeward or mco", protocol)
			}
			if err := host.validate(); err != nil {
				return err
			}
			cfg, err := flags.load(cmd)
			if err != nil {
				return err
			}
			if nodeName == "" {
				return errors.New("--node-name is empty and NODE_NAME is not set")
			}
			restConfig, err := conn.restConfig()
			if err != nil {
				return err
			}
			log := slog.New(slog.NewTextHandler(os.Stderr, nil))
			client, err := kube.NewForConfig(restConfig)
			if err != nil {
				return fmt.Errorf("create Kubernetes client: %w", err)
			}
			health, err := daemon.NewHealth(daemon.HealthConfig{
				RestConfig: restConfig, NodeName: nodeName, Config: cfg, Log: log,
				// NoExecute rows of the policy apply only while the
				// coordinator's disruption guard allows them.
				Guard: daemon.CoordinatorGuard(client),
			})
			if err != nil {
				return err
			}
			log.Info("nodeward agent starting", "node", nodeName, "version", version, "updates", updates)
			if !updates {
				if err := health.Run(cmd.Context()); err != nil && !errors.Is(err, cmd.Context().Err()) {
					return err
				}
				return nil
			}
			drainOpts, err := drainFlags.options()
			if err != nil {
				return err
			}
			update, readiness, err := newUpdateAgent(client, restConfig, health, nodeName, protocol, stateDir, host, drainOpts, log)
			if err != nil {
				return err
			}
			ctx, cancel := context.WithCancel(cmd.Context())
			defer cancel()
			go readiness.Run(ctx, time.Second)
			errs := make(chan error, 2)
			go func() { errs <- health.Run(ctx) }()
			go func() { errs <- update.Run(ctx) }()
			err = <-errs
			cancel()
			<-errs
			if err != nil && !errors.Is(err, cmd.Context().Err()) {
				return err
			}
			return nil
		},
	}
	conn.register(cmd)
	flags.register(cmd)
	drainFlags.register(cmd)
	host.register(cmd)
	cmd.Flags().StringVar(&nodeName, "node-name", os.Getenv("NODE_NAME"), "this node's name (default $NODE_NAME)")
	cmd.Flags().BoolVar(&updates, "updates", true, "run the OS update lifecycle (needs rpm-ostree); false runs node health only")
	cmd.Flags().StringVar(&protocol, "protocol", "nodeward", "coordinator protocol: nodeward or mco (OpenShift's machine-config operator)")
	cmd.Flags().StringVar(&stateDir, "state-dir", "/var/lib/nodeward", "update state directory; must survive reboots")
	return cmd
}

// healthFlags are the health configuration: a YAML file and flags for the
// common fields, which win over the file.
type healthFlags struct {
	configPath        string
	procRoot          string
	metricsAddress    string
	textfileDirectory string
	runtimeEndpoint   string
	diskPaths         []string
	quietPeriod       time.Duration
	badSamples        int
}

func (f *healthFlags) register(cmd *cobra.Command) {
	d := conditions.DefaultConfig()
	fl := cmd.Flags()
	fl.StringVar(&f.configPath, "config", "", "YAML health configuration file (see docs/config.md)")
	fl.StringVar(&f.procRoot, "proc-root", d.ProcRoot, "where /proc is mounted")
	fl.StringVar(&f.metricsAddress, "metrics-address", d.MetricsAddress, "address of /metrics, /healthz and /readyz; empty disables")
	fl.StringVar(&f.textfileDirectory, "textfile-directory", "", "write nodeward.prom here for node_exporter's textfile collector")
	fl.StringVar(&f.runtimeEndpoint, "runtime-endpoint", d.Runtime.Endpoint, "container runtime CRI socket")
	fl.StringSliceVar(&f.diskPaths, "disk-path", d.Disk.Paths, "paths whose filesystems the disk probe watches (repeatable)")
	fl.DurationVar(&f.quietPeriod, "quiet-period", d.Hysteresis.QuietPeriod.Duration, "time without a bad sample before a condition clears")
	fl.IntVar(&f.badSamples, "bad-samples", d.Hysteresis.BadSamples, "consecutive bad samples before a condition turns True")
}

// load reads the file (defaults without one), applies the flags that were
// set and validates the result.
func (f *healthFlags) load(cmd *cobra.Command) (conditions.Config, error) {
	cfg := conditions.DefaultConfig()
	if f.configPath != "" {
		var err error
		if cfg, err = conditions.LoadConfig(f.configPath); err != nil {
			return conditions.Config{}, err
		}
	}
	changed := cmd.Flags().Changed
	if changed("proc-root") {
		cfg.ProcRoot = f.procRoot
	}
	if changed("metrics-address") {
		cfg.MetricsAddress = f.metricsAddress
	}
	if changed("textfile-directory") {
		cfg.TextfileDirectory = f.textfileDirectory
	}
	if changed("runtime-endpoint") {
		cfg.Runtime.Endpoint = f.runtimeEndpoint
	}
	if changed("disk-path") {
		cfg.Disk.Paths = f.diskPaths
	}
	if changed("quiet-period") {
		cfg.Hysteresis.QuietPeriod.Duration = f.quietPeriod
	}
	if changed("bad-samples") {
		cfg.Hysteresis.BadSamples = f.badSamples
	}
	if err := cfg.Validate(); err != nil {
		return conditions.Config{}, fmt.Errorf("flags: %w", err)
	}
	return cfg, nil
}
