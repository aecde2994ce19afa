package main

import (
	"cmp"
	"errors"
	"fmt"
	"log/slog"
	"os"
	"path/filepath"
	"runtime"
	"time"

	"github.com/spf13/cobra"

	"github.com/nodeward/nodeward/api/kube"
	"github.com/nodeward/nodeward/conditions"
	"github.com/nodeward/nodeward/daemon"
	"github.com/nodeward/nodeward/daemon/health"
	"github.com/nodeward/nodeward/daemon/mco"
	"github.com/nodeward/nodeward/daemon/update"
	"github.com/nodeward/nodeward/systemd"
)

// agentOptions are the agent command's flags.
type agentOptions struct {
	conn     kubeFlags
	limit    clientRateLimit
	health   healthFlags
	drain    agentDrainFlags
	host     hostFlags
	nodeName string
	updates  bool
	protocol protocolFlag
	stateDir string
	mcoDrain enumFlag
	mcoRoot  string
	// mcoDrainDegrade is hidden: tests shorten the MCD's 1 h.
	mcoDrainDegrade time.Duration
	// mcoDegrade and mcoPolicyWait are hidden too: tests shorten the
	// grace before Degraded and the daemon's 2 min wait for the policies.
	mcoDegrade, mcoPolicyWait time.Duration
	syncWarn                  time.Duration
	releaseStartup            bool
	maxProcs                  int
}

func newAgentCommand(g *globals) *cobra.Command {
	o := &agentOptions{
		protocol: protocolFlag("nodeward"),
		mcoDrain: enumFlag{value: "controller", allowed: []string{"controller", "nodeward"}},
	}
	cmd := &cobra.Command{
		Use:   "agent",
		Short: "Run the node agent: health conditions, taints and coordinated OS updates",
		Long: "Run the node agent until SIGTERM: health conditions and taints on this node, its liveness Lease,\n" +
			"and the OS update lifecycle the coordinator grants (docs/agent.md)." +
			exitCodesHelp("0 stopped by SIGTERM or SIGINT", "1 failed (the API server refused a start-up step, the metrics address is taken, …)"),
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error { return o.run(cmd, g) },
	}
	o.register(cmd)
	return cmd
}

// run validates the flags, loads the configuration file and runs the
// agent until cmd's context ends.
func (o *agentOptions) run(cmd *cobra.Command, g *globals) error {
	if err := o.host.validate(); err != nil {
		return usageError(err)
	}
	if err := setMaxProcs(o.maxProcs, cmd.Flags().Changed("gomaxprocs")); err != nil {
		return usageError(err)
	}
	cfg, err := o.health.load(cmd, g.logger)
	if err != nil {
		return configError(err)
	}
	if o.nodeName == "" {
		return usageError(errors.New("--node-name is empty and NODE_NAME is not set"))
	}
	restConfig, err := o.conn.restConfig()
	if err != nil {
		return err
	}
	if err := o.limit.apply(restConfig); err != nil {
		return err
	}
	// The agent adds the node to its own lines; the OS edge's
	// lines get it here.
	log := g.logger.With("node", o.nodeName)
	watchdog, err := systemd.WatchdogInterval()
	if err != nil {
		return err
	}
	if cfg.Kernel.CursorFile == "" {
		cfg.Kernel.CursorFile = filepath.Join(o.stateDir, "kernel-log-cursor")
	}
	agentCfg := daemon.Config{
		RestConfig: restConfig, NodeName: o.nodeName,
		Health: &daemon.HealthConfig{Conditions: cfg.Config, LeaseRenewInterval: cfg.LeaseRenewInterval.Duration,
			OOM: health.OOMConfig{Enabled: cfg.OOMKills.Enabled, CgroupRoot: cfg.OOMKills.CgroupRoot, CgroupFS: cfg.OOMKills.CgroupFS}},
		MetricsAddress: cfg.MetricsAddress, MetricsAuth: cfg.MetricsAuthConfig(), TextfileDirectory: cfg.TextfileDirectory,
		Notifier: &systemd.Notifier{}, WatchdogInterval: watchdog, Log: g.logger,
		SyncWarningInterval: o.syncWarn, Build: buildInfo(), ReleaseStartupMemory: o.releaseStartup,
	}
	if o.updates {
		if agentCfg.Update, err = updateConfig(o.host, cfg.HostRoot, o.drain, string(o.protocol), o.stateDir, log); err != nil {
			return err
		}
		agentCfg.Update.MCO = daemon.MCOConfig{Drain: o.mcoDrain.value, Root: cmp.Or(o.mcoRoot, cfg.HostRoot, "/"),
			DrainDegradeAfter: o.mcoDrainDegrade, DegradeAfter: o.mcoDegrade, PolicyWait: o.mcoPolicyWait,
			Units: &systemd.Units{}}
	}
	agent, err := daemon.New(agentCfg)
	if err != nil {
		return err
	}
	log.Info("nodeward agent starting", "version", version, "updates", o.updates)
	return agent.Run(cmd.Context())
}

// register adds the agent's flags to cmd.
func (o *agentOptions) register(cmd *cobra.Command) {
	o.conn.register(cmd, false)
	o.limit.register(cmd)
	o.health.register(cmd)
	o.health.registerAgent(cmd)
	o.drain.register(cmd)
	o.host.register(cmd)
	cmd.Flags().StringVar(&o.nodeName, "node-name", os.Getenv("NODE_NAME"), "this node's name (default $NODE_NAME)")
	cmd.Flags().BoolVar(&o.updates, "updates", true, "run the OS update lifecycle (needs rpm-ostree); false runs node health only")
	cmd.Flags().Var(&o.protocol, "protocol", "coordinator protocol: nodeward or mco (OpenShift's machine-config operator)")
	cmd.Flags().Var(&o.mcoDrain, "mco-drain", "with --protocol=mco, who drains: controller (the MCO's drain controller, through the desiredDrain handshake, as for the machine-config-daemon) or nodeward (nodeward's own ordered, PDB-aware drain)")
	cmd.Flags().StringVar(&o.mcoRoot, "mco-root", "", "with --protocol=mco, the host root under which the rendered config's files, units and SSH keys are written (default --host-root, else /)")
	cmd.Flags().DurationVar(&o.mcoDrainDegrade, "mco-drain-degrade-after", time.Hour, "with --protocol=mco, how long a blocked drain waits before the node reports Degraded")
	_ = cmd.Flags().MarkHidden("mco-drain-degrade-after")
	cmd.Flags().DurationVar(&o.mcoDegrade, "mco-degrade-after", 30*time.Second, "with --protocol=mco, how long a step may keep failing before the node reports Degraded")
	_ = cmd.Flags().MarkHidden("mco-degrade-after")
	cmd.Flags().DurationVar(&o.mcoPolicyWait, "mco-policy-wait", mco.PolicyWait, "with --protocol=mco, how long an update waits for MachineConfiguration/cluster's node disruption policies to catch up with its spec before the node reports Degraded")
	_ = cmd.Flags().MarkHidden("mco-policy-wait")
	cmd.Flags().StringVar(&o.stateDir, "state-dir", "/var/lib/nodeward", "update state directory; must survive reboots")
	cmd.Flags().BoolVar(&o.releaseStartup, "release-startup-memory", true,
		"once ready, unmap the executable's pages and drop them from the page cache, so that only the pages used after start-up are read back, and free start-up's heap (lowers the idle RSS by about half; docs/agent.md)")
	cmd.Flags().IntVar(&o.maxProcs, "gomaxprocs", 1,
		"how many threads run the agent's Go code at once (GOMAXPROCS); 0 keeps Go's default (the CPUs, or the container's CPU limit). "+
			"The environment's GOMAXPROCS is used instead when set and this flag is not given")
	registerSyncWarning(cmd, &o.syncWarn)
}

// setMaxProcs applies --gomaxprocs. The agent's work is waiting (on the API
// server, netlink, PSI, D-Bus) with small bursts of computation, and one
// processor is enough for it: each further one keeps its own allocation
// caches and can wake a thread of its own, memory the agent keeps on every
// node of the fleet. node_exporter, the agent operators compare nodeward
// with, defaults to one as well (--runtime.gomaxprocs). Measured in
// docs/benchmarks.md ("Agent RSS").
func setMaxProcs(n int, given bool) error {
	if n < 0 {
		return fmt.Errorf("--gomaxprocs %d: must be 0 (Go's default) or more", n)
	}
	if n == 0 || (!given && os.Getenv("GOMAXPROCS") != "") {
		return nil
	}
	runtime.GOMAXPROCS(n)
	return nil
}

// registerSyncWarning adds the hidden --sync-warning-interval (tests make
// the warning about an unsynced watch come sooner).
func registerSyncWarning(cmd *cobra.Command, d *time.Duration) {
	cmd.Flags().DurationVar(d, "sync-warning-interval", kube.DefaultStallInterval,
		"warn when the watch of the API server has not synced after this long; repeated with backoff")
	_ = cmd.Flags().MarkHidden("sync-warning-interval")
}

// updateConfig wires the update half: rpm-ostree through osupdate, reboots
// through logind, and the coordinator protocol.
func updateConfig(host hostFlags, hostRoot string, drainFlags agentDrainFlags, protocol, stateDir string, log *slog.Logger) (*daemon.UpdateConfig, error) {
	updater, err := host.updater(stateDir, hostRoot, log)
	if err != nil {
		return nil, fmt.Errorf("OS updater: %w", err)
	}
	drainOpts, err := drainFlags.options()
	if err != nil {
		return nil, err
	}
	selector, err := host.postUpdateSelector()
	if err != nil {
		return nil, err
	}
	uc := &daemon.UpdateConfig{StateDir: stateDir, OS: update.OSUpdate{Updater: updater},
		Reboot: &systemd.Rebooter{Log: log, HostRoot: hostRoot}, BootID: update.FileBootID(host.bootIDFile),
		Protocol: protocol, Drain: drainOpts, PostUpdatePods: selector}
	uc.Tune = func(c *update.Config) {
		c.PollInterval, c.DebugWedgeFile = host.pollInterval, host.debugWedgeFile
	}
	return uc, nil
}

// protocolFlag is --protocol, checked when the flag is parsed.
type protocolFlag string

func (p *protocolFlag) String() string { return string(*p) }
func (p *protocolFlag) Type() string   { return "nodeward|mco" }
func (p *protocolFlag) Set(v string) error {
	if v != "nodeward" && v != "mco" {
		return fmt.Errorf("want nodeward or mco")
	}
	*p = protocolFlag(v)
	return nil
}

// healthFlags are the configuration file and flags for its common fields,
// which win over the file. `check` takes the health flags (register); the
// agent also the flags of its own settings (registerAgent).
type healthFlags struct {
	configPath      string
	procRoot        string
	runtimeEndpoint string
	diskPaths       []string
	quietPeriod     time.Duration
	badSamples      int

	metricsAddress    string
	metrics           metricsFlags
	textfileDirectory string
	hostRoot          string
}

func (f *healthFlags) register(cmd *cobra.Command) {
	d := conditions.DefaultConfig()
	fl := cmd.Flags()
	fl.StringVar(&f.configPath, "config", "", "YAML configuration file (see docs/config.md)")
	fl.StringVar(&f.procRoot, "proc-root", d.ProcRoot, "where /proc is mounted")
	fl.StringVar(&f.runtimeEndpoint, "runtime-endpoint", d.Runtime.Endpoint, "container runtime CRI socket, unix:///path (default: the first of crictl's defaults that answers: containerd, CRI-O, cri-dockerd)")
	fl.StringSliceVar(&f.diskPaths, "disk-path", d.Disk.Paths, "paths whose filesystems the disk probe watches (repeatable)")
	fl.DurationVar(&f.quietPeriod, "quiet-period", d.Hysteresis.QuietPeriod.Duration, "time without a bad sample before a condition clears")
	fl.IntVar(&f.badSamples, "bad-samples", d.Hysteresis.BadSamples, "consecutive bad samples before a condition turns True")
}

// registerAgent adds the flags of the agent's own settings.
func (f *healthFlags) registerAgent(cmd *cobra.Command) {
	d := daemon.DefaultFileConfig()
	fl := cmd.Flags()
	fl.StringVar(&f.metricsAddress, "metrics-address", d.MetricsAddress, "address of /metrics, /healthz and /readyz; empty disables")
	f.metrics.register(cmd, d.MetricsAuth)
	fl.StringVar(&f.textfileDirectory, "textfile-directory", d.TextfileDirectory, "write nodeward.prom here for node_exporter's textfile collector")
	fl.StringVar(&f.hostRoot, "host-root", d.HostRoot, "the host's root filesystem in this container (e.g. /host): rpm-ostree, journalctl and systemctl run chrooted into it; empty runs them directly")
}

// load reads the file (defaults without one), logs its warnings, applies
// the flags that were set and validates the result.
func (f *healthFlags) load(cmd *cobra.Command, log *slog.Logger) (daemon.FileConfig, error) {
	cfg := daemon.DefaultFileConfig()
	if f.configPath != "" {
		var (
			warnings []string
			err      error
		)
		cfg, warnings, err = daemon.LoadFileConfig(f.configPath)
		for _, w := range warnings {
			log.Warn(w, "config", f.configPath)
		}
		if err != nil {
			return daemon.FileConfig{}, err
		}
	}
	changed := cmd.Flags().Changed
	if changed("proc-root") {
		cfg.ProcRoot = f.procRoot
	}
	if changed("metrics-address") {
		cfg.MetricsAddress = f.metricsAddress
	}
	if changed("metrics-auth") {
		cfg.MetricsAuth = f.metrics.auth
	}
	if changed("metrics-tls-cert-file") {
		cfg.MetricsTLSCertFile = f.metrics.certFile
	}
	if changed("metrics-tls-key-file") {
		cfg.MetricsTLSKeyFile = f.metrics.keyFile
	}
	if changed("textfile-directory") {
		cfg.TextfileDirectory = f.textfileDirectory
	}
	if changed("host-root") {
		cfg.HostRoot = f.hostRoot
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
		return daemon.FileConfig{}, fmt.Errorf("flags: %w", err)
	}
	return cfg, nil
}
