package sim

import (
	"context"
	"fmt"
	"log/slog"
	"sync"
	"time"

	"github.com/nodeward/nodeward/daemon"
	"github.com/nodeward/nodeward/daemon/update"
	"k8s.io/client-go/rest"
)

// SimNode runs one node's agent (the real daemon.Agent, update half only)
// in-process on a SimHost. A reboot
// stops the agent (like a machine going down), boots the host and starts a
// new agent from the state directory alone, as after a real reboot.
type SimNode struct {
	Name string
	Host *SimHost
	// Machine, when set, replaces Host as the node's OS edge (for
	// example the rpm-ostree double behind the real osupdate package).
	Machine  Machine
	StateDir string
	// RestConfig reaches the API server; the agent builds its client.
	RestConfig *rest.Config
	Log        *slog.Logger
	// Check overrides the update's post-reboot service check (optional).
	Check update.ServiceCheck
	// RebootDelay is how long the machine stays down.
	RebootDelay time.Duration
	// PowerOff and PowerOn, when set, play the machine going down and
	// coming back to the cluster (cluster.PowerOff, PowerOn): called after
	// the agent stopped and before the host boots. An error is recorded in
	// Status and logged; the reboot goes on.
	PowerOff, PowerOn func(ctx context.Context) error
	// Tune adjusts the agent's configuration before it starts (optional).
	Tune func(*daemon.Config)
	// TuneUpdate adjusts the update machine's settings after SimNode's
	// own (optional).
	TuneUpdate func(*update.Config)

	mu      sync.Mutex
	cancel  context.CancelFunc
	done    chan struct{}
	err     error
	starts  int
	running bool
}

// Start starts the agent. It fails when the agent is already running.
func (n *SimNode) Start() error {
	n.mu.Lock()
	defer n.mu.Unlock()
	if n.running {
		return fmt.Errorf("agent of %s already running", n.Name)
	}
	m := n.machine()
	check := n.Check
	cfg := daemon.Config{
		RestConfig: n.RestConfig, NodeName: n.Name, Log: n.Log,
		Update: &daemon.UpdateConfig{
			StateDir: n.StateDir, OS: m, Reboot: m, BootID: m.BootID,
			Tune: func(c *update.Config) {
				c.PollInterval, c.DrainAttempt = 300*time.Millisecond, 10*time.Second
				if check != nil {
					c.Check = check
				}
				if n.TuneUpdate != nil {
					n.TuneUpdate(c)
				}
			},
		},
	}
	if n.Tune != nil {
		n.Tune(&cfg)
	}
	agent, err := daemon.New(cfg)
	if err != nil {
		return err
	}
	ctx, cancel := context.WithCancel(context.Background())
	n.cancel, n.done, n.running = cancel, make(chan struct{}), true
	n.starts++
	go func(done chan struct{}) {
		defer close(done)
		err := agent.Run(ctx)
		n.mu.Lock()
		n.err = err
		n.mu.Unlock()
	}(n.done)
	return nil
}

// Kill stops the agent at whatever it was doing and waits for it to end.
func (n *SimNode) Kill() {
	n.mu.Lock()
	cancel, done, running := n.cancel, n.done, n.running
	n.running = false
	n.mu.Unlock()
	if !running {
		return
	}
	cancel()
	<-done
}

// Starts counts agent starts (1 + restarts).
func (n *SimNode) Starts() int {
	n.mu.Lock()
	defer n.mu.Unlock()
	return n.starts
}

// Status says whether the agent runs, how often it started and what its
// last run returned: a test that stalls reports it.
func (n *SimNode) Status() string {
	n.mu.Lock()
	defer n.mu.Unlock()
	return fmt.Sprintf("agent running %v, %d starts, last error %v, reboot pending %v",
		n.running, n.starts, n.err, n.machine().RebootPending())
}

// RunReboots serves reboot requests until ctx ends: kill the agent, wait
// RebootDelay, boot the host, start the agent again.
func (n *SimNode) RunReboots(ctx context.Context) {
	for {
		select {
		case <-ctx.Done():
			return
		case <-n.machine().RebootRequests():
		}
		if !n.machine().RebootPending() {
			continue
		}
		n.Kill()
		n.power(ctx, "power off", n.PowerOff)
		select {
		case <-ctx.Done():
			return
		case <-time.After(n.RebootDelay):
		}
		n.power(ctx, "power on", n.PowerOn)
		n.machine().Boot()
		if err := n.Start(); err != nil {
			n.mu.Lock()
			n.err = fmt.Errorf("restart agent after boot: %w", err)
			n.mu.Unlock()
			if n.Log != nil {
				n.Log.Error("restart agent after boot", "node", n.Name, "err", err)
			}
		}
	}
}

// power runs a PowerOff or PowerOn step, when set.
func (n *SimNode) power(ctx context.Context, what string, step func(context.Context) error) {
	if step == nil {
		return
	}
	if err := step(ctx); err != nil {
		n.mu.Lock()
		n.err = fmt.Errorf("%s: %w", what, err)
		n.mu.Unlock()
		if n.Log != nil {
			n.Log.Error(what, "node", n.Name, "err", err)
		}
	}
}

// Machine is a simulated host's OS edge: what the agent calls, and the
// harness's side of the reboot.
type Machine interface {
	update.OSUpdater
	update.Rebooter
	BootID() (string, error)
	// RebootRequests is signalled when a reboot may have been asked for.
	RebootRequests() <-chan struct{}
	RebootPending() bool
	// Boot boots the host; the agent is stopped.
	Boot()
}

func (n *SimNode) machine() Machine {
	if n.Machine != nil {
		return n.Machine
	}
	return n.Host
}
