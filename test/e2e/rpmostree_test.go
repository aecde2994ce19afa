package e2e

import (
	"context"
	"fmt"
	"io"
	"log/slog"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	v1alpha1 "github.com/nodeward/nodeward/api/v1alpha1"
	"github.com/nodeward/nodeward/daemon/update"
	"github.com/nodeward/nodeward/osupdate"
	"github.com/nodeward/nodeward/test/rpmostree"
	"github.com/nodeward/nodeward/test/sim"
)

var buildDouble = sync.OnceValues(func() (string, error) {
	dir, err := os.MkdirTemp("", "rpmostree-double-")
	if err != nil {
		return "", err
	}
	return rpmostree.Build(dir)
})

// doubleMachine is a node whose OS edge is the real osupdate package
// driving the rpm-ostree double; a reboot is the double's boot.
type doubleMachine struct {
	update.OSUpdate
	t      *testing.T
	double *rpmostree.Double
	asked  chan struct{}
}

func newDoubleMachine(t *testing.T, booted rpmostree.Deployment, images map[string]rpmostree.Image) *doubleMachine {
	t.Helper()
	bin, err := buildDouble()
	if err != nil {
		t.Fatal(err)
	}
	d := rpmostree.New(t, bin, booted, images)
	u, err := osupdate.New(osupdate.Config{
		Binary: d.Binary, Env: d.Env(),
		Policy:    osupdate.Policy{DefaultTransport: osupdate.TransportUnverifiedRegistry},
		StatePath: filepath.Join(t.TempDir(), "osupdate.json"), CmdlinePath: d.CmdlinePath(),
		Journal: rpmostree.Journal{Dir: d.Dir}, Log: slog.New(slog.NewTextHandler(io.Discard, nil)),
		StatusTimeout: 10 * time.Second, StageTimeout: 10 * time.Second, FinalizeTimeout: 10 * time.Second,
		TransactionWait: 10 * time.Second, PollInterval: 50 * time.Millisecond,
	})
	if err != nil {
		t.Fatal(err)
	}
	return &doubleMachine{OSUpdate: update.OSUpdate{Updater: u}, t: t, double: d, asked: make(chan struct{}, 1)}
}

func (m *doubleMachine) signal() {
	select {
	case m.asked <- struct{}{}:
	default:
	}
}

// Finalize: rpm-ostree's finalize-deployment reboots by itself.
func (m *doubleMachine) Finalize(ctx context.Context, target string) error {
	err := m.OSUpdate.Finalize(ctx, target)
	m.signal()
	return err
}

func (m *doubleMachine) Reboot(context.Context, string) error {
	m.double.Update(m.t, func(s *rpmostree.State) { s.RebootRequested = true })
	m.signal()
	return nil
}

func (m *doubleMachine) BootID() (string, error) {
	s, err := rpmostree.Load(m.double.Dir)
	if err != nil {
		return "", err
	}
	return fmt.Sprintf("double-boot-%d", s.Boots), nil
}

func (m *doubleMachine) RebootRequests() <-chan struct{} { return m.asked }
func (m *doubleMachine) RebootPending() bool             { return m.double.State(m.t).RebootRequested }
func (m *doubleMachine) Boot()                           { m.double.Boot(m.t) }

// TestUpdateOnTheRpmOstreeDouble runs the real osupdate package against the
// rpm-ostree double: the agent pre-stages the image with finalization
// locked, finalize-deployment reboots the host by itself, and after the boot
// the agent verifies digest and checksum and finishes — one boot, one
// finalize, the rollback deployment kept.
func TestUpdateOnTheRpmOstreeDouble(t *testing.T) {
	t.Parallel()
	const (
		oldRef   = "ostree-unverified-registry:quay.io/fedora/fedora-coreos:41"
		newImage = "quay.io/fedora/fedora-coreos:42"
	)
	oldSum, newSum := strings.Repeat("0a", 32), strings.Repeat("1b", 32)
	m := newDoubleMachine(t,
		rpmostree.Deployment{Checksum: oldSum, ImageRef: oldRef, Digest: "sha256:" + strings.Repeat("a", 64), Kargs: []string{"rw"}},
		map[string]rpmostree.Image{newImage: {Checksum: newSum, Digest: "sha256:" + strings.Repeat("c", 64), Version: "42.1"}})
	p := newPool(t, "ostree", poolOptions{count: 1, maxUnavailable: 1, tune: func(n *sim.SimNode) { n.Machine = m }})
	name := p.names[0]
	target := "ostree-unverified-registry:" + newImage
	p.startAgents()
	p.grant(target, 1, 0)
	p.waitStep(name, v1alpha1.StepDone, time.Minute)

	s := m.double.State(t)
	booted, err := s.BootedDeployment()
	if err != nil {
		t.Fatal(err)
	}
	finalizes := s.CallCount("finalize-deployment")
	if booted.Checksum != newSum || s.Boots != 1 || finalizes != 1 || len(s.Deployments) != 2 {
		t.Fatalf("double after the update: booted %s, %d boots, %d finalize calls, %d deployments; want %s, 1, 1, 2 (calls %v)",
			booted.Checksum, s.Boots, finalizes, len(s.Deployments), newSum, s.Calls)
	}
	n, err := p.node(context.Background(), name)
	if err != nil {
		t.Fatal(err)
	}
	if n.Spec.Unschedulable || n.Annotations[v1alpha1.AnnotationStateTarget] != target {
		t.Fatalf("node after the update: unschedulable %v state-target %q", n.Spec.Unschedulable, n.Annotations[v1alpha1.AnnotationStateTarget])
	}
}
