package chaos

import (
	"os"
	"testing"

	"github.com/nodeward/nodeward/test/cluster"
)

// TestMain removes the nodeward binary the scenarios build once per run
// (sim.BuildProcBinaries): each test starts a control plane of its own, so
// no cluster.Env does it for them.
func TestMain(m *testing.M) {
	code := m.Run()
	cluster.RemoveBuilds()
	os.Exit(code)
}
