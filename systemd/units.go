package systemd

import (
	"cmp"
	"context"
	"fmt"
	"time"

	sddbus "github.com/coreos/go-systemd/v22/dbus"
	"github.com/godbus/dbus/v5"
)

// Units reloads and restarts units, and reloads the manager's own
// configuration (daemon-reload), through org.freedesktop.systemd1.Manager
// over D-Bus: what `systemctl reload|restart UNIT` and `systemctl
// daemon-reload` do. A unit's action queues a job in mode "replace" and
// returns once systemd removes the job: an error unless its result is
// "done".
type Units struct {
	// BusAddress is the system bus; empty means the default system bus
	// (DBUS_SYSTEM_BUS_ADDRESS, else the well-known socket).
	BusAddress string
	// CallTimeout bounds each D-Bus call, daemon-reload included; default
	// 30s.
	CallTimeout time.Duration
	// JobTimeout bounds the wait for a unit's job to finish (a restart
	// waits for the unit to stop and start again); default 5 min.
	JobTimeout time.Duration
}

// JobError is a unit's job that systemd removed with a result other than
// "done" ("failed", "timeout", "canceled", "dependency", "skipped", ...).
type JobError struct {
	// Action is what was asked, as the error says it: "reloading",
	// "restarting".
	Action string
	Unit   string
	Result string
}

func (e *JobError) Error() string {
	return fmt.Sprintf("%s %s: its job finished with result %q, not \"done\"", e.Action, e.Unit, e.Result)
}

// Reload reloads unit's configuration (its ExecReload) and waits for the
// job.
func (u *Units) Reload(ctx context.Context, unit string) error {
	return u.runJob(ctx, "reloading", unit, (*sddbus.Conn).ReloadUnitContext)
}

// Restart stops and starts unit (starts it when it is not running) and
// waits for the job.
func (u *Units) Restart(ctx context.Context, unit string) error {
	return u.runJob(ctx, "restarting", unit, (*sddbus.Conn).RestartUnitContext)
}

// DaemonReload reloads the manager's configuration: unit files and
// drop-ins written since are read. systemd answers once the reload is over.
func (u *Units) DaemonReload(ctx context.Context) error {
	conn, err := u.connect(ctx)
	if err != nil {
		return fmt.Errorf("reloading the systemd manager configuration: connecting to the system bus: %w", err)
	}
	defer conn.Close()
	ctx, cancel := context.WithTimeout(ctx, cmp.Or(u.CallTimeout, 30*time.Second))
	defer cancel()
	if err := conn.ReloadContext(ctx); err != nil {
		return fmt.Errorf("reloading the systemd manager configuration: calling %s.Reload: %w", systemd1Manager, err)
	}
	return nil
}

const systemd1Manager = "org.freedesktop.systemd1.Manager"

// startJob is a go-systemd method that queues a unit's job and sends the
// job's result to the channel when systemd removes it.
type startJob func(c *sddbus.Conn, ctx context.Context, name, mode string, result chan<- string) (int, error)

// runJob queues the job, waits for its JobRemoved signal and checks the
// result.
func (u *Units) runJob(ctx context.Context, action, unit string, start startJob) error {
	conn, err := u.connect(ctx)
	if err != nil {
		return fmt.Errorf("%s %s: connecting to the system bus: %w", action, unit, err)
	}
	defer conn.Close()
	// Buffered: the signal is delivered even when nobody waits any more.
	result := make(chan string, 1)
	callCtx, cancel := context.WithTimeout(ctx, cmp.Or(u.CallTimeout, 30*time.Second))
	_, err = start(conn, callCtx, unit, "replace", result)
	cancel()
	if err != nil {
		return fmt.Errorf("%s %s: queueing the job: %w", action, unit, err)
	}
	jobCtx, cancel := context.WithTimeout(ctx, cmp.Or(u.JobTimeout, 5*time.Minute))
	defer cancel()
	select {
	case r := <-result:
		if r != "done" {
			return &JobError{Action: action, Unit: unit, Result: r}
		}
		return nil
	case <-jobCtx.Done():
		return fmt.Errorf("%s %s: waiting for its job to finish: %w", action, unit, jobCtx.Err())
	}
}

// connect opens go-systemd's pair of connections (calls, signals) to the
// bus. Their lifetime is the caller's ctx, not a call's timeout.
func (u *Units) connect(ctx context.Context) (*sddbus.Conn, error) {
	if u.BusAddress == "" {
		return sddbus.NewSystemConnectionContext(ctx)
	}
	return sddbus.NewConnection(func() (*dbus.Conn, error) {
		return dbus.Connect(u.BusAddress, dbus.WithContext(ctx))
	})
}
