package fakelogind

import (
	"cmp"
	"fmt"
	"sync"
	"testing"

	"github.com/godbus/dbus/v5"
)

const (
	systemd1Service = "org.freedesktop.systemd1"
	systemd1Path    = dbus.ObjectPath("/org/freedesktop/systemd1")
	systemd1Manager = "org.freedesktop.systemd1.Manager"
)

// UnitCall is one recorded call of the fake systemd's Manager: Method is
// "ReloadUnit", "RestartUnit" or "Reload" (daemon-reload, no Unit nor
// Mode).
type UnitCall struct {
	Method, Unit, Mode string
}

// Systemd is the service manager of a simulated host (the kwok nodes of
// the MCO-mode tests, see sim.ProcNode): a fake
// org.freedesktop.systemd1.Manager on the private bus of a fake logind. It
// runs no unit. ReloadUnit and RestartUnit answer with a job path and then
// emit JobRemoved for that job with the result "done", or the result a
// test set for the unit (SetJobResult, e.g. "failed"), or never
// (HoldJobs); Reload
// (daemon-reload) answers at once. Every call is recorded in order.
type Systemd struct {
	mu      sync.Mutex
	calls   []UnitCall
	results map[string]string // unit → job result other than "done"
	held    map[string]bool   // units whose jobs never end
	lastJob uint32
	conn    *dbus.Conn
}

// StartSystemd exports the fake on the bus of l; it leaves the bus at test
// cleanup.
func StartSystemd(t testing.TB, l *Logind) *Systemd {
	t.Helper()
	s, err := NewSystemd(l.Address)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(s.Close)
	return s
}

// NewSystemd connects to the bus at address (a fake logind's) and owns
// org.freedesktop.systemd1 there. Close leaves the bus.
func NewSystemd(address string) (*Systemd, error) {
	conn, err := dbus.Connect(address)
	if err != nil {
		return nil, fmt.Errorf("connecting to the private bus: %w", err)
	}
	s := &Systemd{results: map[string]string{}, held: map[string]bool{}, conn: conn}
	if err := conn.Export(systemdManager{s}, systemd1Path, systemd1Manager); err != nil {
		conn.Close()
		return nil, err
	}
	reply, err := conn.RequestName(systemd1Service, dbus.NameFlagDoNotQueue)
	if err != nil || reply != dbus.RequestNameReplyPrimaryOwner {
		conn.Close()
		return nil, fmt.Errorf("owning %s on the private bus: reply %v, %v", systemd1Service, reply, err)
	}
	return s, nil
}

// Close leaves the bus.
func (s *Systemd) Close() { s.conn.Close() }

// SetJobResult makes the jobs of unit end with result ("failed",
// "timeout", ...); "" or "done" makes them succeed again.
func (s *Systemd) SetJobResult(unit, result string) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if result == "" || result == "done" {
		delete(s.results, unit)
		return
	}
	s.results[unit] = result
}

// HoldJobs makes the jobs of unit never end (no JobRemoved), as a unit
// stuck stopping or reloading; false lets later jobs end again.
func (s *Systemd) HoldJobs(unit string, hold bool) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.held[unit] = hold
}

// Calls returns the recorded calls, in order.
func (s *Systemd) Calls() []UnitCall {
	s.mu.Lock()
	defer s.mu.Unlock()
	return append([]UnitCall{}, s.calls...)
}

// queue records a unit's job and returns its path, ID and result ("" for
// a held job).
func (s *Systemd) queue(method, unit, mode string) (dbus.ObjectPath, uint32, string) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.calls = append(s.calls, UnitCall{Method: method, Unit: unit, Mode: mode})
	s.lastJob++
	result := cmp.Or(s.results[unit], "done")
	if s.held[unit] {
		result = ""
	}
	return dbus.ObjectPath(fmt.Sprintf("%s/job/%d", systemd1Path, s.lastJob)), s.lastJob, result
}

// job queues a unit's job and finishes it. JobRemoved goes out before the
// answer to the call, the harder order for a client: one that reads
// signals on a connection of its own, as go-systemd does, may see them in
// either order from a real systemd, and must not lose a job that ended
// before it learned the job's path.
func (s *Systemd) job(method, unit, mode string) (dbus.ObjectPath, *dbus.Error) {
	path, id, result := s.queue(method, unit, mode)
	if result == "" {
		return path, nil
	}
	if err := s.conn.Emit(systemd1Path, systemd1Manager+".JobRemoved", id, path, unit, result); err != nil {
		return "", dbus.MakeFailedError(err)
	}
	return path, nil
}

type systemdManager struct{ s *Systemd }

// ReloadUnit queues a reload job of name.
func (m systemdManager) ReloadUnit(name, mode string) (dbus.ObjectPath, *dbus.Error) {
	return m.s.job("ReloadUnit", name, mode)
}

// RestartUnit queues a restart job of name.
func (m systemdManager) RestartUnit(name, mode string) (dbus.ObjectPath, *dbus.Error) {
	return m.s.job("RestartUnit", name, mode)
}

// Reload is daemon-reload.
func (m systemdManager) Reload() *dbus.Error {
	m.s.mu.Lock()
	defer m.s.mu.Unlock()
	m.s.calls = append(m.s.calls, UnitCall{Method: "Reload"})
	return nil
}
