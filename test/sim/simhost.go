// Package sim simulates nodes for tests that run the update agent against
// a real API server: SimHost, an OS and reboot double whose state outlives
// the agent as a real host's does; SimNode, the real agent run in-process
// on one; ProcNode, a real `nodeward agent` process on the rpm-ostree
// double; StartFleet to run many; and Granter, a simple stand-in
// coordinator for tests where the coordinator is not under test. The
// scenarios themselves live in test/e2e, test/demo and test/bench.
package sim

import (
	"context"
	"fmt"
	"sync"
	"time"
)

// SimHost is the OS edge of one simulated node: deployments and boots. An
// agent restarted on the same SimHost sees what a restarted agent on a real
// host sees: the same boot ID until the host "boots".
type SimHost struct {
	mu sync.Mutex

	booted, staged, finalized, previous string
	rolledBack                          bool
	boot                                int
	rebootAsked                         bool
	// reboots counts boots that followed a reboot request.
	reboots int

	// StageDelay simulates the download of a new deployment.
	StageDelay time.Duration
	// BadTarget never boots: the machine comes back on the old deployment.
	BadTarget string
	// IgnoreReboots drops that many reboot requests, as if the agent had
	// been killed right before its request reached logind.
	IgnoreReboots int
	asked         chan struct{}
}

// NewSimHost returns a host booted into os.
func NewSimHost(os string) *SimHost {
	return &SimHost{booted: os, previous: os, asked: make(chan struct{}, 1)}
}

// Booted implements daemon.OSUpdater.
func (h *SimHost) Booted(context.Context) (string, error) {
	h.mu.Lock()
	defer h.mu.Unlock()
	return h.booted, nil
}

// Stage implements daemon.OSUpdater; it takes StageDelay unless the target
// is already staged.
func (h *SimHost) Stage(ctx context.Context, target string) error {
	h.mu.Lock()
	done, delay := h.staged == target, h.StageDelay
	h.mu.Unlock()
	if done {
		return nil
	}
	select {
	case <-ctx.Done():
		return ctx.Err()
	case <-time.After(delay):
	}
	h.mu.Lock()
	defer h.mu.Unlock()
	h.staged, h.finalized = target, ""
	return nil
}

// Finalize implements daemon.OSUpdater.
func (h *SimHost) Finalize(_ context.Context, target string) error {
	h.mu.Lock()
	defer h.mu.Unlock()
	if h.staged != target {
		return fmt.Errorf("finalize %s: the staged deployment is %q", target, h.staged)
	}
	h.finalized = target
	return nil
}

// Rollback implements daemon.OSUpdater.
func (h *SimHost) Rollback(context.Context) error {
	h.mu.Lock()
	defer h.mu.Unlock()
	h.rolledBack, h.finalized = true, ""
	return nil
}

// RebootsToIgnore is how many of the IgnoreReboots requests are still to
// come.
func (h *SimHost) RebootsToIgnore() int {
	h.mu.Lock()
	defer h.mu.Unlock()
	return h.IgnoreReboots
}

// Reboot implements daemon.Rebooter: it records the request; the harness
// stops the agent and calls Boot.
func (h *SimHost) Reboot(context.Context, string) error {
	h.mu.Lock()
	defer h.mu.Unlock()
	if h.IgnoreReboots > 0 {
		h.IgnoreReboots--
		return nil
	}
	h.rebootAsked = true
	select {
	case h.asked <- struct{}{}:
	default:
	}
	return nil
}

// BootID implements daemon.BootIDFunc.
func (h *SimHost) BootID() (string, error) {
	h.mu.Lock()
	defer h.mu.Unlock()
	return fmt.Sprintf("sim-boot-%d", h.boot), nil
}

// RebootRequests is signalled when a reboot request is accepted.
func (h *SimHost) RebootRequests() <-chan struct{} { return h.asked }

// RebootPending reports whether a reboot was asked for in this boot.
func (h *SimHost) RebootPending() bool {
	h.mu.Lock()
	defer h.mu.Unlock()
	return h.rebootAsked
}

// Boot starts the machine again: the finalized deployment (or the rollback)
// becomes the booted one. The agent must be stopped first.
func (h *SimHost) Boot() {
	h.mu.Lock()
	defer h.mu.Unlock()
	h.boot++
	h.reboots++
	h.rebootAsked = false
	switch {
	case h.rolledBack:
		h.booted, h.rolledBack = h.previous, false
	case h.finalized != "" && h.finalized != h.BadTarget:
		h.previous, h.booted = h.booted, h.finalized
		h.staged, h.finalized = "", ""
	}
}

// PowerCut reboots the machine without anyone asking (a power cut, a
// kernel panic): the booted OS comes back, and a staged deployment, locked
// or finalized, is lost. The agent must be stopped first. It does not count
// in Reboots.
func (h *SimHost) PowerCut() {
	h.mu.Lock()
	defer h.mu.Unlock()
	h.boot++
	h.rebootAsked = false
	h.staged, h.finalized = "", ""
}

// Staged returns the staged deployment ("" for none).
func (h *SimHost) Staged() string {
	h.mu.Lock()
	defer h.mu.Unlock()
	return h.staged
}

// Reboots counts the boots so far.
func (h *SimHost) Reboots() int {
	h.mu.Lock()
	defer h.mu.Unlock()
	return h.reboots
}
