package sim

import (
	"context"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/nodeward/nodeward/systemd"
	"github.com/nodeward/nodeward/test/fakelogind"
	"github.com/nodeward/nodeward/test/testenv"
)

// TestProcNodeHostSystemd: the service manager of a process node's host is
// on the bus its agent gets as DBUS_SYSTEM_BUS_ADDRESS, where nodeward's
// Units with no bus address of their own find it; a unit the test marks
// as failing fails there.
func TestProcNodeHostSystemd(t *testing.T) {
	bin := ProcBinaries{DBusDaemon: testenv.RequireBinary(t, "dbus-daemon")}
	n, err := NewProcNode(bin, "units-0", "", t.TempDir(), ProcBooted(), ProcImages())
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(n.Close)
	t.Setenv("DBUS_SYSTEM_BUS_ADDRESS", n.Logind.Address)
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	u := &systemd.Units{}
	n.Systemd.SetJobResult("sshd.service", "failed")
	if err := u.Reload(ctx, "crio.service"); err != nil {
		t.Fatal(err)
	}
	if err := u.Restart(ctx, "sshd.service"); err == nil || !strings.Contains(err.Error(), `restarting sshd.service: its job finished with result "failed"`) {
		t.Fatalf("restart of a failing unit: %v", err)
	}
	if err := u.DaemonReload(ctx); err != nil {
		t.Fatal(err)
	}
	want := []fakelogind.UnitCall{{Method: "ReloadUnit", Unit: "crio.service", Mode: "replace"},
		{Method: "RestartUnit", Unit: "sshd.service", Mode: "replace"}, {Method: "Reload"}}
	if got := n.Systemd.Calls(); !slices.Equal(got, want) {
		t.Fatalf("host's Manager calls = %+v, want %+v", got, want)
	}
}
