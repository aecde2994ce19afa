package systemd

import (
	"context"
	"errors"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/nodeward/nodeward/test/fakelogind"
)

// TestUnitsOverDBus: the actions of a change applied without a reboot, in
// order, reach the Manager as ReloadUnit and RestartUnit in mode
// "replace" and Reload, and a job that ends "done" is a success.
func TestUnitsOverDBus(t *testing.T) {
	t.Parallel()
	l := fakelogind.Start(t)
	s := fakelogind.StartSystemd(t, l)
	u := &Units{BusAddress: l.Address, CallTimeout: 5 * time.Second, JobTimeout: 5 * time.Second}
	ctx := context.Background()
	if err := u.Reload(ctx, "crio.service"); err != nil {
		t.Fatal(err)
	}
	if err := u.Restart(ctx, "sshd.service"); err != nil {
		t.Fatal(err)
	}
	if err := u.DaemonReload(ctx); err != nil {
		t.Fatal(err)
	}
	want := []fakelogind.UnitCall{
		{Method: "ReloadUnit", Unit: "crio.service", Mode: "replace"},
		{Method: "RestartUnit", Unit: "sshd.service", Mode: "replace"},
		{Method: "Reload"},
	}
	if got := s.Calls(); !slices.Equal(got, want) {
		t.Fatalf("Manager calls = %+v, want %+v", got, want)
	}
}

// TestUnitsJobFailed: a job removed with another result than "done" is an
// error naming the action, the unit and the result.
func TestUnitsJobFailed(t *testing.T) {
	t.Parallel()
	l := fakelogind.Start(t)
	s := fakelogind.StartSystemd(t, l)
	s.SetJobResult("crio.service", "failed")
	s.SetJobResult("sshd.service", "timeout")
	u := &Units{BusAddress: l.Address, CallTimeout: 5 * time.Second, JobTimeout: 5 * time.Second}
	for _, c := range []struct {
		do             func(context.Context, string) error
		unit, action   string
		result, wantIn string
	}{
		{u.Reload, "crio.service", "reloading", "failed", `reloading crio.service: its job finished with result "failed"`},
		{u.Restart, "sshd.service", "restarting", "timeout", `restarting sshd.service: its job finished with result "timeout"`},
	} {
		err := c.do(context.Background(), c.unit)
		var jobErr *JobError
		if !errors.As(err, &jobErr) || *jobErr != (JobError{Action: c.action, Unit: c.unit, Result: c.result}) {
			t.Fatalf("%s %s: %v, want a JobError with result %q", c.action, c.unit, err, c.result)
		}
		if !strings.Contains(err.Error(), c.wantIn) {
			t.Errorf("error %q does not say %q", err, c.wantIn)
		}
	}
	s.SetJobResult("crio.service", "done")
	if err := u.Reload(context.Background(), "crio.service"); err != nil {
		t.Fatalf("reload after the unit was mended: %v", err)
	}
}

// TestUnitsJobNeverEnds: a job that systemd never removes is waited for
// until JobTimeout, and the error says which unit's job it was.
func TestUnitsJobNeverEnds(t *testing.T) {
	t.Parallel()
	l := fakelogind.Start(t)
	s := fakelogind.StartSystemd(t, l)
	s.HoldJobs("crio.service", true)
	u := &Units{BusAddress: l.Address, CallTimeout: 5 * time.Second, JobTimeout: 200 * time.Millisecond}
	err := u.Restart(context.Background(), "crio.service")
	if !errors.Is(err, context.DeadlineExceeded) || !strings.Contains(err.Error(), "restarting crio.service: waiting for its job to finish") {
		t.Fatalf("restart whose job never ends: %v, want a deadline naming the unit", err)
	}
	if calls := s.Calls(); len(calls) != 1 || calls[0].Unit != "crio.service" {
		t.Fatalf("Manager calls = %+v, want the one restart", calls)
	}
}

// TestUnitsNoBus: without a bus each action fails at once, saying what it
// was doing.
func TestUnitsNoBus(t *testing.T) {
	t.Parallel()
	u := &Units{BusAddress: "unix:path=" + filepath.Join(t.TempDir(), "none"), CallTimeout: 5 * time.Second}
	ctx := context.Background()
	for _, c := range []struct {
		err  error
		want string
	}{
		{u.Reload(ctx, "crio.service"), "reloading crio.service: connecting to the system bus"},
		{u.Restart(ctx, "sshd.service"), "restarting sshd.service: connecting to the system bus"},
		{u.DaemonReload(ctx), "reloading the systemd manager configuration: connecting to the system bus"},
	} {
		if c.err == nil || !strings.Contains(c.err.Error(), c.want) {
			t.Errorf("error %v, want one saying %q", c.err, c.want)
		}
	}
}
