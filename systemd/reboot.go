package systemd

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"strings"
	"syscall"
	"time"

	"github.com/godbus/dbus/v5"

	"github.com/nodeward/nodeward/hostexec"
)

const (
	login1Service = "org.freedesktop.login1"
	login1Path    = dbus.ObjectPath("/org/freedesktop/login1")
	login1Manager = "org.freedesktop.login1.Manager"
)

// Inhibitor is one lock held through logind (ListInhibitors).
type Inhibitor struct {
	What, Who, Why, Mode string
	UID, PID             uint32
}

// Rebooter reboots through logind over D-Bus and falls back to
// `systemctl reboot` when logind cannot be reached or refuses.
type Rebooter struct {
	// BusAddress is the system bus; empty means the default system bus.
	BusAddress string
	// Systemctl is the fallback command; default "systemctl".
	Systemctl string
	// HostRoot, when set, is the host's root filesystem in the agent's
	// container: the fallback runs the host's systemctl chrooted into it.
	HostRoot string
	// CallTimeout bounds each D-Bus call and the fallback; default 30s.
	CallTimeout time.Duration
	Log         *slog.Logger
}

func (r *Rebooter) connect() (*dbus.Conn, error) {
	if r.BusAddress == "" {
		return dbus.ConnectSystemBus()
	}
	return dbus.Connect(r.BusAddress)
}

// Inhibitors lists the locks logind holds.
func (r *Rebooter) Inhibitors(ctx context.Context) ([]Inhibitor, error) {
	conn, err := r.connect()
	if err != nil {
		return nil, fmt.Errorf("connecting to the system bus: %w", err)
	}
	defer conn.Close()
	return r.inhibitors(ctx, conn)
}

func (r *Rebooter) inhibitors(ctx context.Context, conn *dbus.Conn) ([]Inhibitor, error) {
	ctx, cancel := context.WithTimeout(ctx, cmp.Or(r.CallTimeout, 30*time.Second))
	defer cancel()
	var raw [][]any
	call := conn.Object(login1Service, login1Path).CallWithContext(ctx, login1Manager+".ListInhibitors", 0)
	if err := call.Store(&raw); err != nil {
		return nil, fmt.Errorf("listing logind inhibitors: %w", err)
	}
	out := make([]Inhibitor, 0, len(raw))
	for _, f := range raw {
		if len(f) != 6 {
			continue
		}
		var in Inhibitor
		in.What, _ = f[0].(string)
		in.Who, _ = f[1].(string)
		in.Why, _ = f[2].(string)
		in.Mode, _ = f[3].(string)
		in.UID, _ = f[4].(uint32)
		in.PID, _ = f[5].(uint32)
		out = append(out, in)
	}
	return out, nil
}

// Reboot asks logind to reboot (non-interactive), after logging every
// block inhibitor on shutdown and who holds it; when the D-Bus path fails
// it runs `systemctl reboot`. It returns once the request is accepted;
// the machine goes down later.
func (r *Rebooter) Reboot(ctx context.Context, reason string) error {
	log := cmp.Or(r.Log, slog.Default())
	err := r.rebootDBus(ctx, reason, log)
	if err == nil {
		return nil
	}
	if replyLost(err) {
		// logind had the call: the bus closing before its answer is how a
		// shutdown that has begun looks from here (dbus-daemon stops with
		// the system). The request counts as accepted; if the machine does
		// not go down after all, the update machine asks again after its
		// RebootRetry, and then this path finds the bus gone and falls back.
		log.Info("the system bus closed before logind answered the reboot call, as it does once the shutdown has begun", "err", err)
		return nil
	}
	log.Warn("reboot through logind failed, falling back to systemctl", "err", err)
	ctx, cancel := context.WithTimeout(ctx, cmp.Or(r.CallTimeout, 30*time.Second))
	defer cancel()
	host := hostexec.Host{Root: r.HostRoot}
	out, ferr := host.Command(ctx, cmp.Or(r.Systemctl, "systemctl"), "reboot", "--message="+reason).CombinedOutput()
	if ferr != nil {
		return errors.Join(fmt.Errorf("reboot through logind: %w", err),
			fmt.Errorf("systemctl reboot: %w: %s", ferr, strings.TrimSpace(string(out))))
	}
	return nil
}

func (r *Rebooter) rebootDBus(ctx context.Context, reason string, log *slog.Logger) error {
	conn, err := r.connect()
	if err != nil {
		return fmt.Errorf("connecting to the system bus: %w", err)
	}
	defer conn.Close()
	inhibitors, err := r.inhibitors(ctx, conn)
	if err != nil {
		log.Warn("could not list logind inhibitors", "err", err)
	}
	for _, in := range inhibitors {
		if in.Mode == "block" && strings.Contains(in.What, "shutdown") {
			log.Warn("a block inhibitor holds back the reboot", "who", in.Who, "why", in.Why, "what", in.What, "pid", in.PID, "uid", in.UID)
		}
	}
	log.Info("rebooting through logind", "reason", reason)
	ctx, cancel := context.WithTimeout(ctx, cmp.Or(r.CallTimeout, 30*time.Second))
	defer cancel()
	if err := conn.Object(login1Service, login1Path).CallWithContext(ctx, login1Manager+".Reboot", 0, false).Err; err != nil {
		if isDisconnect(err) {
			err = &lostReplyError{err: err}
		}
		return fmt.Errorf("calling %s.Reboot: %w", login1Manager, err)
	}
	return nil
}

// lostReplyError: the Reboot call was sent, and the connection closed
// before an answer came.
type lostReplyError struct{ err error }

func (e *lostReplyError) Error() string {
	return "connection closed before the answer: " + e.err.Error()
}
func (e *lostReplyError) Unwrap() error { return e.err }

func replyLost(err error) bool {
	var lost *lostReplyError
	return errors.As(err, &lost)
}

// isDisconnect tells a closed connection (the bus went away) from an
// answer of logind or a timeout.
func isDisconnect(err error) bool {
	return errors.Is(err, io.EOF) || errors.Is(err, io.ErrUnexpectedEOF) || errors.Is(err, dbus.ErrClosed) ||
		errors.Is(err, syscall.ECONNRESET) || errors.Is(err, syscall.EPIPE)
}
