package chaos

import (
	"context"
	"fmt"
	"sync"
	"time"

	"github.com/nodeward/nodeward/test/rpmostree"
	"github.com/nodeward/nodeward/test/sim"
)

// Machine serves one simulated host whose agent is a real process: it
// reboots the host when the agent asks (rpm-ostree finalize-deployment or
// logind, as sim.ProcNode.RunReboots does), restarts an agent that exited
// on its own a second later (systemd's Restart=always), and kills the agent
// with SIGKILL on demand, restarting it after a delay. One goroutine owns
// the agent's lifecycle, so a kill never races a reboot.
type Machine struct {
	Node    *sim.ProcNode
	Watcher *Watcher
	Log     func(format string, args ...any)

	kills chan time.Duration

	mu                      sync.Mutex
	boots, killed, selfExit int
	hook                    *RebootHook
}

// RebootHook is what befalls a machine's Node during one reboot, armed on
// several machines at once: the first of them to go down claims it. Down
// runs once the agent is dead; the machine then stays down for Hold (at
// least its RebootDelay), boots, runs Up (its kubelet registering the
// Node), and starts the agent.
type RebootHook struct {
	Hold     time.Duration
	Down, Up func(ctx context.Context, node string)

	mu      sync.Mutex
	claimed string
	done    chan struct{}
}

// NewRebootHook returns a hook to arm on machines.
func NewRebootHook(hold time.Duration, down, up func(context.Context, string)) *RebootHook {
	return &RebootHook{Hold: hold, Down: down, Up: up, done: make(chan struct{})}
}

// claim gives the hook to node unless another machine has it.
func (h *RebootHook) claim(node string) bool {
	h.mu.Lock()
	defer h.mu.Unlock()
	if h.claimed != "" {
		return false
	}
	h.claimed = node
	return true
}

// Claimed names the machine that took the hook ("" for none yet).
func (h *RebootHook) Claimed() string {
	h.mu.Lock()
	defer h.mu.Unlock()
	return h.claimed
}

// Done is closed once the claiming machine has run Up.
func (h *RebootHook) Done() <-chan struct{} { return h.done }

// Withdraw claims the hook for nobody, if no machine has it yet; it
// reports whether a machine had it.
func (h *RebootHook) Withdraw() bool {
	return !h.claim("-")
}

// Disarm takes h back if the machine has not gone down with it.
func (m *Machine) Disarm(h *RebootHook) {
	m.mu.Lock()
	defer m.mu.Unlock()
	if m.hook == h {
		m.hook = nil
	}
}

// Arm makes h befall the machine's next reboot, unless another machine
// claims it first.
func (m *Machine) Arm(h *RebootHook) {
	m.mu.Lock()
	defer m.mu.Unlock()
	m.hook = h
}

// NewMachine wraps node; Run serves it.
func NewMachine(node *sim.ProcNode, w *Watcher, log func(string, ...any)) *Machine {
	return &Machine{Node: node, Watcher: w, Log: log, kills: make(chan time.Duration)}
}

// Kill asks for the agent to be killed with SIGKILL and started again
// restartAfter later; it returns once the machine took the order (or ctx
// ended).
func (m *Machine) Kill(ctx context.Context, restartAfter time.Duration) bool {
	select {
	case m.kills <- restartAfter:
		return true
	case <-ctx.Done():
		return false
	}
}

// Counts returns the boots, chaos kills and agent exits of its own so far.
func (m *Machine) Counts() (boots, killed, selfExit int) {
	m.mu.Lock()
	defer m.mu.Unlock()
	return m.boots, m.killed, m.selfExit
}

// Run starts the agent and serves the machine until ctx ends; the agent
// is killed on return.
func (m *Machine) Run(ctx context.Context) error {
	defer m.Node.Kill()
	if err := m.Node.Start(); err != nil {
		return err
	}
	tick := time.NewTicker(200 * time.Millisecond)
	defer tick.Stop()
	var restartAt time.Time
	down, logindAsked := false, false
	for {
		select {
		case <-ctx.Done():
			return nil
		case <-m.Node.Logind.Rebooted():
			logindAsked = true
		case d := <-m.kills:
			m.Node.Kill()
			m.mu.Lock()
			m.killed++
			m.mu.Unlock()
			down, restartAt = true, time.Now().Add(d)
			continue
		case <-tick.C:
		}
		s, err := rpmostree.Load(m.Node.Double.Dir)
		if err != nil {
			return fmt.Errorf("machine %s: %w", m.Node.Name, err)
		}
		if logindAsked || s.RebootRequested {
			// The machine goes down whatever its agent is doing.
			logindAsked = false
			if err := m.reboot(ctx); err != nil {
				return err
			}
			down = false
			continue
		}
		if down {
			if time.Now().After(restartAt) {
				if err := m.Node.Start(); err != nil {
					return err
				}
				down = false
			}
			continue
		}
		if !m.Node.Running() {
			m.mu.Lock()
			m.selfExit++
			m.mu.Unlock()
			m.Log("agent of %s exited on its own; restarting it in 1 s; log tail:\n%s", m.Node.Name, m.Node.LogTail(600))
			m.Node.Kill() // reap, so that Start may run again
			down, restartAt = true, time.Now().Add(time.Second)
		}
	}
}

// reboot checks the drain (pods bound to the node at the moment it goes
// down), kills the agent as a machine going down does, keeps the machine
// down for the node's RebootDelay, boots the double and starts the agent.
func (m *Machine) reboot(ctx context.Context) error {
	down := time.Now()
	if m.Watcher != nil {
		m.Watcher.CheckDrained(ctx, m.Node.Name, down)
	}
	m.Node.Kill()
	m.mu.Lock()
	h := m.hook
	m.hook = nil
	m.mu.Unlock()
	if h != nil && !h.claim(m.Node.Name) {
		h = nil
	}
	delay := m.Node.RebootDelay
	if h != nil {
		h.Down(ctx, m.Node.Name)
		delay = max(delay, h.Hold)
	}
	sleep(ctx, delay)
	if ctx.Err() != nil {
		return nil
	}
	if err := m.Node.Double.BootHost(); err != nil {
		return fmt.Errorf("machine %s: boot: %w", m.Node.Name, err)
	}
	m.mu.Lock()
	m.boots++
	m.mu.Unlock()
	if h != nil {
		h.Up(ctx, m.Node.Name)
		close(h.done)
	}
	return m.Node.Start()
}
