package hostmode_test

import (
	"context"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/nodeward/nodeward/systemd"
	"github.com/nodeward/nodeward/test/hostmode"
)

// The test's units: nw-marker appends a line to a file of its state
// directory at each start and each reload, before its job is over (a
// start job waits for ExecStartPre, a reload job for ExecReload);
// nw-badreload's reload fails.
const (
	markerUnit = `[Unit]
Description=nodeward test unit
[Service]
StateDirectory=nw-units
ExecStartPre=/bin/sh -c 'echo start >> /var/lib/nw-units/starts'
ExecStart=/bin/sleep infinity
ExecReload=/bin/sh -c 'echo reload >> /var/lib/nw-units/reloads'
[Install]
WantedBy=multi-user.target
`
	badReloadUnit = `[Unit]
Description=nodeward test unit whose reload fails
[Service]
ExecStart=/bin/sleep infinity
ExecReload=/bin/false
[Install]
WantedBy=multi-user.target
`
)

// TestUnitActionsOnRealSystemd: nodeward's systemd.Units, from the test
// process, against the systemd of a booted container through the
// container's system bus socket (/proc/<its PID 1>/root/run/dbus/...).
// Each action returns once its job is over, so its effect is there at
// once: a reload ran ExecReload in the same process, a restart started a
// new one, a daemon-reload read the unit file rewritten after boot. A reload
// that fails, and a unit that does not exist, are errors naming the unit.
func TestUnitActionsOnRealSystemd(t *testing.T) {
	h, units := bootUnitsHost(t)
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	before := unitProps(h, "nw-marker.service")
	if got := markerLines(t, h, "starts"); got != 1 || before["ActiveState"] != "active" {
		t.Fatalf("after boot: %d starts, %v; want one, active", got, before)
	}

	if err := units.Reload(ctx, "nw-marker.service"); err != nil {
		t.Fatal(err)
	}
	if got, props := markerLines(t, h, "reloads"), unitProps(h, "nw-marker.service"); got != 1 || props["MainPID"] != before["MainPID"] {
		t.Fatalf("after Reload: %d reloads, MainPID %s (was %s); want one reload, the same process", got, props["MainPID"], before["MainPID"])
	}

	if err := units.Restart(ctx, "nw-marker.service"); err != nil {
		t.Fatal(err)
	}
	after := unitProps(h, "nw-marker.service")
	if got := markerLines(t, h, "starts"); got != 2 || after["ActiveState"] != "active" || after["MainPID"] == before["MainPID"] {
		t.Fatalf("after Restart: %d starts, %v (MainPID was %s); want two, active, a new process", got, after, before["MainPID"])
	}

	err := units.Reload(ctx, "nw-badreload.service")
	var jobErr *systemd.JobError
	if !errors.As(err, &jobErr) || jobErr.Result != "failed" || !strings.Contains(err.Error(), `reloading nw-badreload.service: its job finished with result "failed"`) {
		t.Fatalf("reload of a unit whose ExecReload fails: %v; want a JobError with result \"failed\" naming the unit", err)
	}
	t.Logf("failed reload: %v", err)
	err = units.Restart(ctx, "nw-missing.service")
	if err == nil || !strings.Contains(err.Error(), "restarting nw-missing.service") {
		t.Fatalf("restart of a unit that does not exist: %v; want an error naming it", err)
	}
	t.Logf("restart of a missing unit: %v", err)

	checkDaemonReload(ctx, t, h, units)
}

// checkDaemonReload rewrites nw-marker's unit file with another
// Description and checks that systemd reads it at DaemonReload and not
// before.
func checkDaemonReload(ctx context.Context, t *testing.T, h *host, units *systemd.Units) {
	t.Helper()
	changed := strings.Replace(markerUnit, "Description=nodeward test unit", "Description=nodeward test unit, reloaded", 1)
	if err := writeUnitFile(filepath.Join(h.root, "etc/systemd/system/nw-marker.service"), changed); err != nil {
		t.Fatal(err)
	}
	if props := unitProps(h, "nw-marker.service"); props["NeedDaemonReload"] != "yes" || props["Description"] != "nodeward test unit" {
		t.Fatalf("before DaemonReload: %v; want the old Description, NeedDaemonReload=yes", props)
	}
	if err := units.DaemonReload(ctx); err != nil {
		t.Fatal(err)
	}
	if props := unitProps(h, "nw-marker.service"); props["NeedDaemonReload"] != "no" || props["Description"] != "nodeward test unit, reloaded" {
		t.Fatalf("after DaemonReload: %v; want the new Description, NeedDaemonReload=no", props)
	}
}

// bootUnitsHost boots a container with the test's units enabled (no
// nodeward installed: the test process is the client) and returns it with
// Units on its system bus.
func bootUnitsHost(t *testing.T) (*host, *systemd.Units) {
	t.Helper()
	requireHost(t)
	tarball, err := rootfs()
	if err != nil {
		t.Fatal(err)
	}
	h := &host{t: t, name: "hm-units", dir: t.TempDir()}
	h.root = filepath.Join(h.dir, "root")
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
	defer cancel()
	if err := hostmode.Extract(ctx, tarball, h.root); err != nil {
		t.Fatal(err)
	}
	if err := installTestUnits(h.root); err != nil {
		t.Fatal(err)
	}
	if h.c, err = hostmode.Boot(ctx, hostmode.BootOptions{Name: h.name, Root: h.root, LogDir: h.dir, Log: t.Logf}); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		if t.Failed() {
			ctx, cancel := h.ctx()
			defer cancel()
			t.Logf("journal of the test units:\n%s", tailString(h.c.Journal(ctx, "-b", "0", "-u", "nw-marker.service", "-u", "nw-badreload.service"), 4000))
		}
		if err := h.c.Stop(); err != nil {
			t.Errorf("container %s ended before the test did: %v", h.name, err)
		}
	})
	pid1, err := h.c.PID1(ctx)
	if err != nil {
		t.Fatal(err)
	}
	bus := fmt.Sprintf("unix:path=/proc/%d/root/run/dbus/system_bus_socket", pid1)
	return h, &systemd.Units{BusAddress: bus, CallTimeout: 30 * time.Second, JobTimeout: time.Minute}
}

// installTestUnits writes the test's units into root, enabled, and its
// host name.
func installTestUnits(root string) error {
	etc := filepath.Join(root, "etc")
	for name, text := range map[string]string{"nw-marker.service": markerUnit, "nw-badreload.service": badReloadUnit} {
		if err := writeUnitFile(filepath.Join(etc, "systemd/system", name), text); err != nil {
			return err
		}
		link := filepath.Join(etc, "systemd/system/multi-user.target.wants", name)
		if err := os.MkdirAll(filepath.Dir(link), 0o755); err != nil {
			return err
		}
		if err := os.Symlink("/etc/systemd/system/"+name, link); err != nil {
			return err
		}
	}
	return os.WriteFile(filepath.Join(etc, "hostname"), []byte("hm-units\n"), 0o644)
}

func writeUnitFile(path, text string) error {
	if err := os.MkdirAll(filepath.Dir(path), 0o755); err != nil {
		return err
	}
	return os.WriteFile(path, []byte(text), 0o644)
}

// unitProps are the properties of unit the test checks.
func unitProps(h *host, unit string) map[string]string {
	h.t.Helper()
	ctx, cancel := h.ctx()
	defer cancel()
	props, err := h.c.Show(ctx, unit, "ActiveState", "MainPID", "Description", "NeedDaemonReload")
	if err != nil {
		h.t.Fatal(err)
	}
	return props
}

// markerLines counts the lines of nw-marker's file name, as the container
// sees it.
func markerLines(t *testing.T, h *host, name string) int {
	t.Helper()
	out := h.exec("sh", "-c", "cat /var/lib/nw-units/"+name+" 2>/dev/null || true")
	return strings.Count(out, "\n")
}
