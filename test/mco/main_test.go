package mco_test

import (
	"context"
	"os"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/nodeward/nodeward/test/cluster"
	"github.com/nodeward/nodeward/test/mco"
)

// One control plane for the package. The tests are not parallel: each runs
// the controller, which has no leader election, and two would both act on
// every pool.
var env cluster.Env

func TestMain(m *testing.M) { os.Exit(env.Run(m)) }

// fixture is one test's pool on the shared control plane: two rendered
// configs (<name>-1 the nodes have, <name>-2 to roll out), the pool on the
// first, count kwok nodes provisioned with it (one zone each, so the
// controller's zone ordering is the node order) and a Watcher bounding the
// unavailable nodes by the pool's maxUnavailable, 1.
type fixture struct {
	cp               *cluster.ControlPlane
	dir              string
	c                *mco.Client
	pool             mco.Pool
	nodes            []string
	watch            *mco.Watcher
	config1, config2 string
}

func newFixture(t testing.TB, name string, count int) *fixture {
	t.Helper()
	return newFixtureWith(t, name, count,
		mco.MachineConfig{OSImageURL: "quay.io/fedora/fedora-coreos:41"},
		mco.MachineConfig{OSImageURL: "quay.io/fedora/fedora-coreos:42", KernelArguments: []string{"nodeward.test=1"}})
}

// newFixtureWith is newFixture with the two configs' contents (their names
// are the fixture's).
func newFixtureWith(t testing.TB, name string, count int, first, second mco.MachineConfig) *fixture {
	t.Helper()
	dir := mco.RequireDir(t)
	cp := env.ControlPlane(t)
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	c := mco.NewClient(t, cp.Config(), dir)
	if err := c.Install(ctx, mco.InstallOptions{}); err != nil {
		t.Fatal(err)
	}
	f := &fixture{cp: cp, dir: dir, c: c, config1: "rendered-" + name + "-1", config2: "rendered-" + name + "-2"}
	first.Name, second.Name = f.config1, f.config2
	c.CreateMachineConfig(ctx, first)
	c.CreateMachineConfig(ctx, second)
	f.pool = mco.Pool{Name: name, Config: f.config1}
	c.CreatePool(ctx, f.pool)
	zones := []string{"zone-a", "zone-b", "zone-c", "zone-d"}
	f.nodes = c.CreateNodes(cp, cluster.NodeSpec{Prefix: name, Count: count, Zones: zones[:min(count, len(zones))]}, f.pool)
	f.watch = mco.WatchPool(t, c.Kube, f.pool)
	f.watch.Bound(1)
	return f
}

func (f *fixture) start(t testing.TB, set mco.FeatureSet, args ...string) *mco.Controller {
	t.Helper()
	return mco.StartController(t, f.dir, f.cp.KubeconfigPath(), mco.ControllerOptions{FeatureSet: set, Args: args})
}

// targeted lists the nodes whose desiredConfig is config while their
// currentConfig is not: the ones the controller told to update.
func (f *fixture) targeted(t testing.TB, config string) []string {
	t.Helper()
	var out []string
	for _, name := range f.nodes {
		n := f.node(t, name)
		if n.Annotations[mco.AnnotationDesiredConfig] == config && n.Annotations[mco.AnnotationCurrentConfig] != config {
			out = append(out, name)
		}
	}
	return out
}

func (f *fixture) node(t testing.TB, name string) *corev1.Node {
	t.Helper()
	n, err := f.c.Kube.CoreV1().Nodes().Get(context.Background(), name, metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	return n
}
