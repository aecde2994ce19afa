package daemon

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"log/slog"
	"math"
	"path/filepath"
	"sync"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/labels"
	"k8s.io/client-go/rest"

	"github.com/nodeward/nodeward/api/kube"
	"github.com/nodeward/nodeward/api/kube/metricsauth"
	"github.com/nodeward/nodeward/conditions"
	"github.com/nodeward/nodeward/daemon/health"
	"github.com/nodeward/nodeward/daemon/mco"
	"github.com/nodeward/nodeward/daemon/update"
	"github.com/nodeward/nodeward/drain"
	"github.com/nodeward/nodeward/footprint"
)

// Config is everything the agent needs; cmd/nodeward builds it from flags
// and the configuration file.
type Config struct {
	// RestConfig reaches the API server. The agent builds its one client
	// from it, with every request counted in nodeward_api_requests_total.
	RestConfig *rest.Config
	NodeName   string
	// Health configures the health half; nil runs none (tests and
	// benchmarks of the update half).
	Health *HealthConfig
	// Update configures the update half; nil runs none (--updates=false).
	Update *UpdateConfig
	// MetricsAddress serves /metrics, /healthz and /readyz; empty serves
	// nothing.
	MetricsAddress string
	// MetricsAuth guards /metrics: TLS and Kubernetes authorization
	// (TokenReview, SubjectAccessReview through the agent's client), or
	// none; the zero value is none.
	MetricsAuth metricsauth.Config
	// TextfileDirectory receives nodeward.prom for node_exporter's textfile
	// collector; empty writes nothing.
	TextfileDirectory string
	// Notifier sends sd_notify messages; nil sends none.
	Notifier Notifier
	// WatchdogInterval is systemd's WatchdogSec ($WATCHDOG_USEC); the
	// agent sends WATCHDOG=1 at half of it while its loops are alive.
	// Zero sends none.
	WatchdogInterval time.Duration
	// Registry receives every metric of the agent; a fresh one when nil.
	Registry *prometheus.Registry
	// Build labels nodeward_build_info.
	Build kube.BuildInfo
	Log   *slog.Logger
	// SyncWarningInterval is how long the watch of the Node may stay
	// unsynced before a warning naming the API server and the error;
	// warnings repeat with backoff. kube.DefaultStallInterval when zero.
	SyncWarningInterval time.Duration
	// Now is the clock of every part; time.Now when nil.
	Now func() time.Time
	// ReleaseStartupMemory unmaps the pages of the executable and frees
	// the heap pages that start-up used, once the agent is first ready
	// (package footprint). A process of its own only: a test binary
	// running several agents leaves it off.
	ReleaseStartupMemory bool
}

// HealthConfig is the health half's configuration.
type HealthConfig struct {
	Conditions conditions.Config
	// LeaseRenewInterval is how often the liveness Lease is renewed;
	// health.DefaultLeaseRenewInterval when zero.
	LeaseRenewInterval time.Duration
	// Guard allows NoExecute taints; health.CoordinatorGuard when nil.
	Guard conditions.DisruptionGuard
	// NetworkOptions adjust the network probe (tests watch a namespace).
	NetworkOptions []conditions.NetworkOption
	// OOM turns on the OOM-kill Events.
	OOM health.OOMConfig
}

// UpdateConfig is the update half's configuration: its OS edge and the
// coordinator protocol.
type UpdateConfig struct {
	// StateDir holds the update state; it must survive reboots.
	StateDir string
	OS       update.OSUpdater
	Reboot   update.Rebooter
	// BootID defaults to the kernel's.
	BootID update.BootIDFunc
	// Protocol is "nodeward" (the default: nodeward's coordinator) or
	// "mco" (OpenShift's machine-config operator).
	Protocol string
	Drain    drain.Options
	// MCO configures the MCO protocol's host edits and drain.
	MCO MCOConfig
	// PostUpdatePods selects pods that must run Ready on the node before
	// it is uncordoned after an update; nil selects none.
	PostUpdatePods labels.Selector
	// Tune adjusts the update machine's settings last (tests and
	// benchmarks: poll interval, timeouts).
	Tune func(*update.Config)
}

// Agent is one node's agent: one API client, one watch of its own Node
// shared by its parts, the health half, the update half, readiness and the
// metrics endpoint. It owns the process lifecycle: Run returns when ctx
// ends or a part fails.
type Agent struct {
	cfg     Config
	client  *kube.Client
	watch   *NodeWatch
	health  *health.Reporter
	machine *update.Machine
	// certs writes the ControllerConfig's certificates (MCO protocol).
	certs     *mco.CertificateWriter
	events    *update.NodeEvents
	readiness *Readiness
	liveness  *Liveness
	server    *server
}

// New validates cfg and builds the agent; Run starts it.
func New(cfg Config) (*Agent, error) {
	if cfg.NodeName == "" {
		return nil, errors.New("node name is empty: set --node-name or NODE_NAME")
	}
	if cfg.RestConfig == nil {
		return nil, errors.New("agent: no API server configuration")
	}
	if cfg.Registry == nil {
		cfg.Registry = prometheus.NewRegistry()
	}
	if cfg.Log == nil {
		cfg.Log = slog.Default()
	}
	// Every line of the agent names its node, once: callers pass a logger
	// without the key.
	cfg.Log = cfg.Log.With("node", cfg.NodeName)
	if cfg.Now == nil {
		cfg.Now = time.Now
	}
	if err := kube.RegisterRuntimeMetrics(cfg.Registry, cfg.Build); err != nil {
		return nil, err
	}
	count, err := kube.RequestCounter(cfg.Registry, "agent")
	if err != nil {
		return nil, fmt.Errorf("register API request metrics: %w", err)
	}
	rc := rest.CopyConfig(cfg.RestConfig)
	rc.Wrap(count)
	client, err := kube.NewForConfig(rc)
	if err != nil {
		return nil, fmt.Errorf("create Kubernetes client: %w", err)
	}
	stall := &kube.StallWarner{Log: cfg.Log, Server: rc.Host, What: "node watch", Interval: cfg.SyncWarningInterval}
	a := &Agent{cfg: cfg, client: client, watch: NewNodeWatch(client, cfg.NodeName, stall),
		readiness: &Readiness{Notifier: cfg.Notifier, Log: cfg.Log}, liveness: NewLiveness(cfg.Now)}
	a.readiness.Add("node watch", SyncedCheck(a.watch.Synced()))
	// One recorder of Events about the Node for both halves.
	a.events = update.NewNodeEvents(client, "nodeward-agent", cfg.NodeName, cfg.Log)
	if cfg.Health != nil {
		if err := a.buildHealth(*cfg.Health); err != nil {
			a.stop()
			return nil, err
		}
	}
	if cfg.Update != nil {
		if err := a.buildUpdate(rc, *cfg.Update); err != nil {
			a.stop()
			return nil, err
		}
	}
	if cfg.MetricsAddress != "" {
		auth := cfg.MetricsAuth
		if auth.Mode == "" {
			auth.Mode = metricsauth.None
		}
		endpoint, err := metricsauth.Setup(auth, rc, cfg.Log)
		if err != nil {
			a.stop()
			return nil, fmt.Errorf("metricsAuth: %w", err)
		}
		if a.server, err = listen(cfg.MetricsAddress, endpoint, cfg.Registry, a.readiness, a.liveness, cfg.Log); err != nil {
			a.stop()
			return nil, err
		}
	}
	return a, nil
}

func (a *Agent) buildHealth(hc HealthConfig) error {
	guard := hc.Guard
	if guard == nil {
		// NoExecute rows of the policy apply only while the coordinator's
		// disruption guard allows them.
		guard = health.CoordinatorGuard(a.client)
	}
	// The publisher turns at least every heartbeat; a write (with the
	// client's retries) is bounded well within healthBusyLimit.
	heartbeat := cmp.Or(hc.Conditions.HeartbeatInterval.Duration, 5*time.Minute)
	reporter, err := health.New(health.Config{
		Client: a.client, NodeName: a.cfg.NodeName, Config: hc.Conditions, LeaseRenewInterval: hc.LeaseRenewInterval, Registerer: a.cfg.Registry,
		Guard: guard, NetworkOptions: hc.NetworkOptions, OOM: hc.OOM, Log: a.cfg.Log, Now: a.cfg.Now,
		Events: func(reason, message string) {
			a.events.Event(&corev1.Node{ObjectMeta: metav1.ObjectMeta{Name: a.cfg.NodeName}}, true, reason, message)
		},
		Beat: a.liveness.Register("health", heartbeat+time.Minute, healthBusyLimit),
	}, a.watch, a.watch.Subscribe())
	if err != nil {
		return err
	}
	a.health = reporter
	a.readiness.Add("health", reporter.Ready)
	return nil
}

func (a *Agent) buildUpdate(rc *rest.Config, uc UpdateConfig) error {
	if uc.OS == nil || uc.Reboot == nil {
		return errors.New("update: the OS updater and the rebooter are required")
	}
	if uc.StateDir == "" {
		uc.StateDir = "/var/lib/nodeward"
	}
	if uc.BootID == nil {
		uc.BootID = update.KernelBootID
	}
	log := a.cfg.Log
	metrics, err := update.NewMetrics(a.cfg.Registry)
	if err != nil {
		return fmt.Errorf("register update metrics: %w", err)
	}
	drainMetrics, err := drain.NewMetrics(a.cfg.Registry)
	if err != nil {
		return fmt.Errorf("register drain metrics: %w", err)
	}
	own, err := update.NewKubeWorkloads(drain.Config{Client: a.client, Node: a.cfg.NodeName, Options: uc.Drain,
		Log: log, Metrics: drainMetrics, Recorder: a.events.Recorder()})
	var workloads update.Workloads = own
	if err != nil {
		return fmt.Errorf("update: drain: %w", err)
	}
	var protocol update.Protocol = &update.AnnotationProtocol{Client: a.client, Node: a.cfg.NodeName, Observe: a.watch.Observe}
	switch uc.Protocol {
	case "", "nodeward":
	case "mco":
		if protocol, uc.OS, workloads, err = a.mcoParts(rc, uc, workloads); err != nil {
			return err
		}
	default:
		return fmt.Errorf("protocol %q: want nodeward or mco", uc.Protocol)
	}
	// The watch is also a fresh reader: the drain policy is read from the
	// API server when a drain times out (update.FreshNodeSource).
	var _ update.FreshNodeSource = a.watch
	mc := update.Config{
		Store: update.Store{Path: filepath.Join(uc.StateDir, "update-state.json")},
		Node:  a.watch, Protocol: protocol, OS: uc.OS, Reboot: uc.Reboot, BootID: uc.BootID,
		Workloads: workloads, Events: a.events, Status: a.readiness, Metrics: metrics,
		Log: log, Wake: a.watch.Subscribe(), Now: a.cfg.Now,
	}
	if uc.PostUpdatePods != nil {
		mc.Check = update.PodsReadyCheck(a.client, uc.PostUpdatePods)
	}
	if uc.Tune != nil {
		uc.Tune(&mc)
	}
	// The machine turns at least every poll interval while it waits; one
	// action (a download) is bounded by osupdate's own timeouts.
	mc.Heartbeat = a.liveness.Register("update", 3*cmp.Or(mc.PollInterval, 5*time.Second)+10*time.Second, updateBusyLimit)
	if a.machine, err = update.NewMachine(mc); err != nil {
		return err
	}
	a.readiness.Add("update", SyncedCheck(a.machine.Synced()))
	return nil
}

// healthBusyLimit bounds one publish of conditions and taints for the
// watchdog.
const healthBusyLimit = 10 * time.Minute

// updateBusyLimit bounds one action of the update machine for the
// watchdog: osupdate's longest call (a download, 1 h) and its transaction
// wait.
const updateBusyLimit = 75 * time.Minute

// MetricsAddr is where /metrics is served ("" when it is not).
func (a *Agent) MetricsAddr() string {
	if a.server == nil {
		return ""
	}
	return a.server.Addr()
}

// Ready is the agent's combined readiness, as /readyz serves it.
func (a *Agent) Ready() (bool, string) { return a.readiness.Ready() }

// Health is the health half (nil when it does not run).
func (a *Agent) Health() *health.Reporter { return a.health }

// UpdateState is the update machine's state (zero when it does not run).
func (a *Agent) UpdateState() update.State {
	if a.machine == nil {
		return update.State{}
	}
	return a.machine.State()
}

// Run runs every part until ctx ends or one of them fails, then stops the
// others and waits for them.
func (a *Agent) Run(ctx context.Context) error {
	defer a.stop()
	ctx, cancel := context.WithCancel(ctx)
	defer cancel()
	var wg sync.WaitGroup
	defer wg.Wait()
	wg.Go(func() { a.watch.Run(ctx) })
	if a.server != nil {
		wg.Go(func() { a.server.serve(ctx) })
	}
	if dir := a.cfg.TextfileDirectory; dir != "" {
		wg.Go(func() { writeTextfiles(ctx, dir, a.cfg.Registry, a.cfg.Log) })
	}
	wg.Go(func() {
		a.readiness.Run(ctx, time.Second)
		if a.cfg.ReleaseStartupMemory && ctx.Err() == nil {
			a.releaseStartupMemory()
		}
	})
	if a.cfg.WatchdogInterval > 0 {
		wg.Go(func() { a.petWatchdog(ctx) })
	}
	// STOPPING=1 at once; a critical update step in flight (finalize,
	// rollback) still runs to its end before the parts return.
	stopping := context.AfterFunc(ctx, func() { a.readiness.notify("STOPPING=1") })
	defer stopping()
	select {
	case <-ctx.Done():
		return nil
	case <-a.watch.Synced():
	}
	errs := make(chan error, 2)
	parts := 0
	if a.health != nil {
		parts++
		wg.Go(func() { errs <- a.health.Run(ctx) })
	}
	if a.machine != nil {
		parts++
		wg.Go(func() { errs <- a.machine.Run(ctx) })
	}
	if a.certs != nil {
		// Not a part whose end ends the agent: it logs and retries.
		wg.Go(func() { _ = a.certs.Run(ctx) })
	}
	if parts == 0 {
		<-ctx.Done()
		return nil
	}
	err := <-errs
	cancel()
	if ctx.Err() != nil && errors.Is(err, ctx.Err()) {
		return nil
	}
	return err
}

// petWatchdog sends WATCHDOG=1 at half the watchdog interval while every
// loop is alive; a wedged loop stops the pings and systemd restarts the
// agent.
func (a *Agent) petWatchdog(ctx context.Context) {
	tick := time.NewTicker(a.cfg.WatchdogInterval / 2)
	defer tick.Stop()
	withheld := false
	for {
		if ok, why := a.liveness.Alive(); ok {
			a.readiness.notify("WATCHDOG=1")
			withheld = false
		} else if !withheld {
			a.cfg.Log.Error("a loop of the agent is stuck: withholding the systemd watchdog ping", "why", why)
			withheld = true
		}
		select {
		case <-ctx.Done():
			return
		case <-tick.C:
		}
	}
}

// releaseStartupMemory gives back what only start-up needed; a failure
// costs memory, not function, so it is logged and the agent goes on.
func (a *Agent) releaseStartupMemory() {
	r, err := footprint.Release()
	if err != nil {
		a.cfg.Log.Warn("release the memory only start-up used", "err", err)
		return
	}
	mib := func(b uint64) float64 { return math.Round(float64(b)/(1<<20)*10) / 10 }
	a.cfg.Log.Info("released the memory only start-up used",
		"rss_mib_before", mib(r.Before.Total), "rss_mib_after", mib(r.After.Total),
		"file_mib_before", mib(r.Before.File), "file_mib_after", mib(r.After.File),
		"anon_mib_before", mib(r.Before.Anon), "anon_mib_after", mib(r.After.Anon),
		"executable_mappings", r.Mappings)
}

// Alive is the agent's liveness, as /livez and the watchdog see it.
func (a *Agent) Alive() (bool, string) { return a.liveness.Alive() }

func (a *Agent) stop() {
	if a.events != nil {
		a.events.Stop()
	}
}
