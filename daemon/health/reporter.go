// Package health is the agent's host-health half: it runs the probes of
// package conditions, publishes their conditions and taints on the agent's
// own Node, and renews the agent's liveness Lease. The Node itself is
// watched once, by the daemon package, and shared.
package health

import (
	"context"
	"errors"
	"log/slog"
	"sync"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/nodeward/nodeward/api/kube"
	"github.com/nodeward/nodeward/api/v1alpha1"
	"github.com/nodeward/nodeward/conditions"
)

// DefaultLeaseRenewInterval is a third of the agent Lease's duration, so
// that two renewals may fail before the Lease lapses.
const DefaultLeaseRenewInterval = 80 * time.Second

// Config wires the health half of the agent.
type Config struct {
	// Client is the agent's one API client.
	Client   *kube.Client
	NodeName string
	Config   conditions.Config
	// LeaseRenewInterval is how often the liveness Lease is renewed;
	// DefaultLeaseRenewInterval when zero. It must be shorter than the
	// Lease's duration (v1alpha1.AgentLeaseDurationSeconds).
	LeaseRenewInterval time.Duration
	// Registerer receives the health metrics.
	Registerer prometheus.Registerer
	// Guard allows NoExecute taints; nil refuses them all.
	Guard conditions.DisruptionGuard
	// NetworkOptions adjust the network probe (tests watch a namespace).
	NetworkOptions []conditions.NetworkOption
	Log            *slog.Logger
	// Now is the clock of the probes, the monitor, the publisher and the
	// Lease; time.Now when nil.
	Now func() time.Time
	// Beat is the publisher loop's heartbeat for the agent's watchdog
	// (conditions.PublisherConfig.Beat). Optional.
	Beat func(busy bool)
	// OOM turns on the OOM-kill Events.
	OOM OOMConfig
	// Events records a Warning Event on the Node (temporary kernel
	// problems, OOM kills); nil drops them.
	Events func(reason, message string)
}

// CheckLeaseRenewInterval says why d cannot be the liveness Lease's
// renewal interval, nil when it can.
func CheckLeaseRenewInterval(d time.Duration) error {
	lease := v1alpha1.AgentLeaseDurationSeconds * time.Second
	switch {
	case d <= 0:
		return errors.New("must be a positive duration")
	case d >= lease:
		return errors.New("must be shorter than the Lease duration (" + lease.String() + ")")
	}
	return nil
}

// Reporter runs the probes and keeps the node's nodeward conditions, taints
// and liveness Lease current.
type Reporter struct {
	probes    []conditions.Probe
	monitor   *conditions.Monitor
	publisher *conditions.Publisher
	lease     *LeaseRenewer
	nodes     conditions.NodeCache
	changed   <-chan struct{}
	// oom reports OOM kills; nil when off.
	oom *oomEvents
}

// New validates cfg and builds the reporter over the agent's shared copy of
// its Node; nodeChanged is signalled whenever the Node changes. Run starts
// it.
func New(cfg Config, nodes conditions.NodeCache, nodeChanged <-chan struct{}) (*Reporter, error) {
	if cfg.NodeName == "" || cfg.Client == nil || nodes == nil {
		return nil, errors.New("health: Client, NodeName and the node cache are required")
	}
	if err := cfg.Config.Validate(); err != nil {
		return nil, err
	}
	if cfg.LeaseRenewInterval == 0 {
		cfg.LeaseRenewInterval = DefaultLeaseRenewInterval
	}
	if err := CheckLeaseRenewInterval(cfg.LeaseRenewInterval); err != nil {
		return nil, conditions.FieldErrors{{Field: "leaseRenewInterval", Value: cfg.LeaseRenewInterval, Why: err.Error()}}
	}
	if cfg.Registerer == nil {
		cfg.Registerer = prometheus.NewRegistry()
	}
	if cfg.Log == nil {
		cfg.Log = slog.Default()
	}
	if cfg.Now == nil {
		cfg.Now = time.Now
	}
	metrics := conditions.NewMetrics(cfg.Registerer)
	warn := cfg.Events
	if warn == nil {
		warn = func(string, string) {}
	}
	var oom *oomEvents
	if cfg.OOM.Enabled {
		var err error
		if oom, err = newOOMEvents(cfg.OOM, cfg.Client, cfg.NodeName, warn, cfg.Registerer, cfg.Log); err != nil {
			return nil, err
		}
	}
	probes := conditions.Probes(cfg.Config, &conditions.Env{Registerer: cfg.Registerer, Now: cfg.Now,
		NetworkOptions: cfg.NetworkOptions, Log: cfg.Log, Events: warn})
	r := &Reporter{
		probes: probes,
		monitor: conditions.NewMonitor(conditions.MonitorConfig{Probes: probes, Hysteresis: cfg.Config.Hysteresis,
			Metrics: metrics, Log: cfg.Log, Now: cfg.Now}),
		publisher: conditions.NewPublisher(conditions.PublisherConfig{
			Client: cfg.Client, Node: cfg.NodeName, Taints: conditions.NewTaintTable(cfg.Config.Taints),
			Guard: cfg.Guard, Heartbeat: cfg.Config.HeartbeatInterval.Duration, Metrics: metrics, Log: cfg.Log, Now: cfg.Now,
			Beat: cfg.Beat,
		}),
		nodes:   nodes,
		changed: nodeChanged,
		oom:     oom,
	}
	r.lease = NewLeaseRenewer(LeaseConfig{Client: cfg.Client, Node: cfg.NodeName,
		Interval: cfg.LeaseRenewInterval, Owner: nodes.Latest, Log: cfg.Log, Now: cfg.Now})
	return r, nil
}

// Conditions returns the current damped conditions.
func (r *Reporter) Conditions() []conditions.Condition { return r.monitor.Conditions() }

// Ready reports whether every probe has run and the conditions were
// published; the reason says what is missing.
func (r *Reporter) Ready() (bool, string) {
	if !r.monitor.Ready() {
		return false, "probes have not all run yet"
	}
	return r.publisher.Settled()
}

// Run works until ctx ends. The caller starts it once the Node watch has
// synced, so that the Lease is created owned by the Node.
func (r *Reporter) Run(ctx context.Context) error {
	defer conditions.Close(r.probes)
	var wg sync.WaitGroup
	defer wg.Wait()
	ctx, cancel := context.WithCancel(ctx)
	defer cancel()
	wg.Go(func() { r.monitor.Run(ctx) })
	wg.Go(func() { r.lease.Run(ctx) })
	if r.oom != nil {
		wg.Go(func() { r.oom.run(ctx) })
	}
	r.publisher.Run(ctx, r.monitor, r.nodes, r.changed)
	return nil
}
