package protosim

import (
	"context"
	"fmt"
)

// host is the in-memory model of one machine's rpm-ostree and boot: a
// booted deployment, at most one staged deployment (locked until
// finalized), the previous deployment for a rollback, and a boot counter.
// It models what the agent relies on: a locked staged deployment does not
// survive a reboot; a finalized one boots unless the boot fails; a rollback
// boots the previous deployment.
type host struct {
	booted, previous string
	staged           string
	finalized        bool
	// target is the last finalized target: a rollback returns from it,
	// and from nothing else (osupdate never rolls back from the
	// known-good deployment to an older one).
	target      string
	rolledBack  bool
	boot        int
	rebootAsked bool
	// failNextBoot makes the next boot come back on the booted OS (a
	// failed ostree-finalize-staged).
	failNextBoot bool
	// brokenTargets boot but fail verification (booted as "<t>-broken").
	brokenTargets map[string]bool
}

func newHost(os string) *host {
	return &host{booted: os, previous: os, brokenTargets: map[string]bool{}}
}

func (h *host) Booted(context.Context) (string, error) { return h.booted, nil }

func (h *host) Stage(_ context.Context, target string) error {
	if h.staged != target {
		h.staged, h.finalized = target, false
	}
	h.rolledBack = false // a new deployment is the default again
	return nil
}

func (h *host) Finalize(_ context.Context, target string) error {
	if h.staged != target {
		return fmt.Errorf("finalize %s: the staged deployment is %q", target, h.staged)
	}
	h.finalized, h.target = true, target
	return nil
}

func (h *host) Rollback(context.Context) error {
	h.finalized, h.staged = false, ""
	if h.target != "" && (h.booted == h.target || h.booted == h.target+"-broken") {
		h.rolledBack = true
	}
	return nil
}

func (h *host) Reboot(context.Context, string) error {
	h.rebootAsked = true
	return nil
}

func (h *host) BootID() (string, error) { return fmt.Sprintf("boot-%d", h.boot), nil }

// reboot boots the machine: planned (after a request) or not.
func (h *host) reboot() {
	h.boot++
	h.rebootAsked = false
	switch {
	case h.rolledBack:
		h.booted, h.rolledBack = h.previous, false
	case h.finalized && !h.failNextBoot:
		next := h.staged
		if h.brokenTargets[next] {
			next += "-broken"
		}
		h.previous, h.booted = h.booted, next
	}
	h.failNextBoot = false
	h.staged, h.finalized = "", false
}
