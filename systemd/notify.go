package systemd

import (
	"fmt"
	"time"

	sddaemon "github.com/coreos/go-systemd/v22/daemon"
)

// Notifier speaks sd_notify(3) to the service manager through
// $NOTIFY_SOCKET. Without that variable (not started by systemd) every call
// does nothing. It is the one place in nodeward that sends these messages;
// the agent (daemon.Agent) decides which: READY=1, STATUS=, WATCHDOG=1,
// STOPPING=1.
type Notifier struct{}

// Notify sends one raw state line, e.g. "READY=1". It implements the
// daemon's Notifier interface.
func (n *Notifier) Notify(state string) error {
	if _, err := sddaemon.SdNotify(false, state); err != nil {
		return fmt.Errorf("sd_notify %q: %w", state, err)
	}
	return nil
}

// WatchdogInterval is the service's watchdog interval (WatchdogSec, from
// $WATCHDOG_USEC when $WATCHDOG_PID is this process), or 0 when systemd
// runs no watchdog for it. The agent pings at half of it while its loops
// are alive.
func WatchdogInterval() (time.Duration, error) {
	interval, err := sddaemon.SdWatchdogEnabled(false)
	if err != nil {
		return 0, fmt.Errorf("reading the systemd watchdog settings: %w", err)
	}
	return interval, nil
}
