package systemd

import (
	"context"
	"fmt"
	"log/slog"
	"strings"
	"time"

	sddaemon "github.com/coreos/go-systemd/v22/daemon"
)

// Notifier speaks sd_notify(3) to the service manager through
// $NOTIFY_SOCKET. Without that variable (not started by systemd) every call
// does nothing. It is the one place in nodeward that sends these messages.
type Notifier struct {
	Log *slog.Logger
}

// Notify sends one raw state line, e.g. "READY=1". It implements the
// daemon's Notifier interface.
func (n *Notifier) Notify(state string) error {
	if _, err := sddaemon.SdNotify(false, state); err != nil {
		return fmt.Errorf("sd_notify %q: %w", state, err)
	}
	return nil
}

func (n *Notifier) send(state string) {
	if err := n.Notify(state); err != nil && n.Log != nil {
		n.Log.Warn("notifying systemd failed", "state", state, "err", err)
	}
}

// Ready tells systemd that start-up is complete (after the first sync).
func (n *Notifier) Ready() { n.send(sddaemon.SdNotifyReady) }

// Stopping tells systemd that shutdown began.
func (n *Notifier) Stopping() { n.send(sddaemon.SdNotifyStopping) }

// Status publishes the current step as STATUS= (one line, shown by
// `systemctl status`). It implements the daemon's StatusSink.
func (n *Notifier) Status(line string) {
	line = strings.ReplaceAll(strings.TrimSpace(line), "\n", " ")
	n.send("STATUS=" + line)
}

// RunWatchdog sends WATCHDOG=1 at half of $WATCHDOG_USEC until ctx ends,
// as long as alive reports the agent's loops healthy; a wedged agent stops
// petting and systemd restarts it. It returns at once when the watchdog is
// off.
func (n *Notifier) RunWatchdog(ctx context.Context, alive func() bool) error {
	interval, err := sddaemon.SdWatchdogEnabled(false)
	if err != nil {
		return fmt.Errorf("reading the systemd watchdog settings: %w", err)
	}
	if interval <= 0 {
		return nil
	}
	tick := time.NewTicker(interval / 2)
	defer tick.Stop()
	for {
		if alive == nil || alive() {
			n.send(sddaemon.SdNotifyWatchdog)
		} else if n.Log != nil {
			n.Log.Warn("agent not alive, withholding the systemd watchdog ping")
		}
		select {
		case <-ctx.Done():
			return nil
		case <-tick.C:
		}
	}
}
