package daemon

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"os"
	"path/filepath"
	"strings"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/nodeward/nodeward/api/kube"
	"github.com/nodeward/nodeward/drain"
)

// UpdateAgentConfig wires the update lifecycle of one node to the cluster.
type UpdateAgentConfig struct {
	Client   *kube.Client
	NodeName string
	// StateDir holds the update state file; it must survive reboots
	// (default /var/lib/nodeward).
	StateDir string
	OS       OSUpdater
	Reboot   Rebooter
	// BootID defaults to the kernel's /proc/sys/kernel/random/boot_id.
	BootID BootIDFunc
	// Drainer defaults to a KubeDrainer with DrainOptions.
	Drainer      Drainer
	DrainOptions drain.Options
	// Protocol defaults to AnnotationProtocol with DefaultAnnotationKeys.
	Protocol Protocol
	// Health defaults to DefaultHealthCheck.
	Health HealthCheck
	// Registerer receives the update metrics; none when nil.
	Registerer prometheus.Registerer
	// Status receives STATUS= lines (systemd); optional.
	Status StatusSink
	Log    *slog.Logger

	// Tuning; zero values take UpdateConfig's defaults.
	PollInterval, DrainTimeout, DrainAttempt, HealthTimeout, RebootRetry time.Duration
	// StageAfterDrain: see UpdateConfig (benchmarks only).
	StageAfterDrain bool
}

// UpdateAgent runs the update machine of one node against the cluster.
type UpdateAgent struct {
	cfg     UpdateAgentConfig
	watch   *NodeWatch
	events  *NodeEvents
	machine *UpdateMachine
}

// NewUpdateAgent checks cfg and builds the agent; Run starts it.
func NewUpdateAgent(cfg UpdateAgentConfig) (*UpdateAgent, error) {
	if cfg.Client == nil || cfg.NodeName == "" || cfg.OS == nil || cfg.Reboot == nil {
		return nil, errors.New("update agent: Client, NodeName, OS and Reboot are required")
	}
	if cfg.StateDir == "" {
		cfg.StateDir = "/var/lib/nodeward"
	}
	if cfg.BootID == nil {
		cfg.BootID = KernelBootID
	}
	if cfg.Protocol == nil {
		cfg.Protocol = &AnnotationProtocol{Client: cfg.Client, Node: cfg.NodeName, Keys: DefaultAnnotationKeys()}
	}
	if cfg.Log == nil {
		cfg.Log = slog.Default()
	}
	cfg.Log = cfg.Log.With("node", cfg.NodeName)
	var metrics *UpdateMetrics
	if cfg.Registerer != nil {
		var err error
		if metrics, err = NewUpdateMetrics(cfg.Registerer); err != nil {
			return nil, fmt.Errorf("register update metrics: %w", err)
		}
	}
	var drainMetrics *drain.Metrics
	if cfg.Registerer != nil {
		var err error
		if drainMetrics, err = drain.NewMetrics(cfg.Registerer); err != nil {
			return nil, fmt.Errorf("register drain metrics: %w", err)
		}
	}
	a := &UpdateAgent{cfg: cfg, watch: NewNodeWatch(cfg.Client, cfg.NodeName)}
	a.events = NewNodeEvents(cfg.Client, "nodeward-agent", cfg.NodeName)
	if cfg.Drainer == nil {
		d, err := NewKubeDrainer(drain.Config{Client: cfg.Client, Node: cfg.NodeName, Options: cfg.DrainOptions,
			Log: cfg.Log, Metrics: drainMetrics, Recorder: a.events.recorder})
		if err != nil {
			a.events.Stop()
			return nil, fmt.Errorf("update agent drain: %w", err)
		}
		cfg.Drainer = d
		a.cfg.Drainer = d
	}
	m, err := NewUpdateMachine(UpdateConfig{
		Store: StateStore{Path: filepath.Join(cfg.StateDir, "update-state.json")},
		Node:  a.watch, Protocol: cfg.Protocol, OS: cfg.OS, Reboot: cfg.Reboot, BootID: cfg.BootID,
		Drain: cfg.Drainer, Health: cfg.Health, Events: a.events, Status: cfg.Status, Metrics: metrics,
		Log: cfg.Log, Wake: a.watch.Wake(),
		PollInterval: cfg.PollInterval, DrainTimeout: cfg.DrainTimeout, DrainAttempt: cfg.DrainAttempt,
		HealthTimeout: cfg.HealthTimeout, RebootRetry: cfg.RebootRetry, StageAfterDrain: cfg.StageAfterDrain,
	})
	if err != nil {
		return nil, err
	}
	a.machine = m
	return a, nil
}

// Run watches the node and drives the update machine until ctx ends.
func (a *UpdateAgent) Run(ctx context.Context) error {
	defer a.events.Stop()
	ctx, cancel := context.WithCancel(ctx)
	defer cancel()
	done := make(chan struct{})
	go func() { defer close(done); a.watch.Run(ctx) }()
	err := a.machine.Run(ctx)
	cancel()
	<-done
	return err
}

// Synced is closed after the first sync (state loaded, reported, first
// step run): the agent is ready from then on.
func (a *UpdateAgent) Synced() <-chan struct{} { return a.machine.Synced() }

// State returns the machine's current state.
func (a *UpdateAgent) State() State { return a.machine.State() }

// KernelBootIDPath is where the kernel publishes its boot ID.
const KernelBootIDPath = "/proc/sys/kernel/random/boot_id"

// KernelBootID reads the kernel's boot ID, which changes at every boot.
func KernelBootID() (string, error) { return FileBootID(KernelBootIDPath)() }

// FileBootID reads the boot ID from path (a simulated host's stand-in for
// the kernel's file).
func FileBootID(path string) BootIDFunc {
	return func() (string, error) {
		data, err := os.ReadFile(path)
		if err != nil {
			return "", fmt.Errorf("read boot ID: %w", err)
		}
		return strings.TrimSpace(string(data)), nil
	}
}
