// Command demo rolls a new OS out over simulated nodes on a real local
// control plane: etcd, kube-apiserver, the controllers and kwok nodes, one
// `nodeward agent` process per node on its own simulated host (the
// rpm-ostree double, a fake logind on a private D-Bus; a reboot kills the
// agent process and starts a new one), real pods under a PDB that the drains
// evict, a `nodeward coordinator` process and an UpdatePool. It prints the
// `nodeward status` tables as the rollout goes and a summary, and stops
// everything it started before it exits (also on Ctrl-C).
//
//	NODEWARD_TESTBIN_DIR=... go run ./test/demo -nodes 6 -max-unavailable 2
package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"os"
	"os/exec"
	"os/signal"
	"path/filepath"
	"strings"
	"sync"
	"syscall"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/intstr"
	"k8s.io/client-go/dynamic"
	"k8s.io/utils/ptr"

	v1alpha1 "github.com/nodeward/nodeward/api/v1alpha1"
	"github.com/nodeward/nodeward/test/cluster"
	"github.com/nodeward/nodeward/test/rpmostree"
	"github.com/nodeward/nodeward/test/sim"
)

type options struct {
	nodes          int
	maxUnavailable int
	download       time.Duration
	reboot         time.Duration
	pods           int
	timeout        time.Duration
	logs           bool
}

func main() {
	var o options
	flag.IntVar(&o.nodes, "nodes", 6, "number of simulated nodes (two zones)")
	flag.IntVar(&o.maxUnavailable, "max-unavailable", 2, "the pool's maxUnavailable")
	flag.DurationVar(&o.download, "download", 3*time.Second, "simulated download time of the new OS (staged before any slot)")
	flag.DurationVar(&o.reboot, "reboot", 2*time.Second, "simulated reboot time")
	flag.IntVar(&o.pods, "pods", 12, "pods of the demo workload spread over the nodes")
	flag.DurationVar(&o.timeout, "timeout", 5*time.Minute, "give up after this long")
	flag.BoolVar(&o.logs, "agent-logs", false, "print the end of each agent's log when the demo ends (always on failure)")
	flag.Parse()
	if o.nodes < 1 || o.maxUnavailable < 1 || o.pods < 0 {
		fmt.Fprintf(os.Stderr, "demo: -nodes %d and -max-unavailable %d must be at least 1, -pods %d at least 0\n",
			o.nodes, o.maxUnavailable, o.pods)
		os.Exit(2)
	}
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	if err := run(ctx, o); err != nil {
		fmt.Fprintln(os.Stderr, "demo:", err)
		stop()
		os.Exit(1)
	}
}

// demoPool is the UpdatePool the demo rolls out, and the group label of
// its nodes and workload.
const demoPool = "demo"

func run(ctx context.Context, o options) (err error) {
	binDir, err := binDir()
	if err != nil {
		return err
	}
	work, err := os.MkdirTemp("", "nodeward-demo-")
	if err != nil {
		return err
	}
	defer os.RemoveAll(work)
	defer cluster.RemoveBuilds() // the nodeward binary BuildProcBinaries built
	cp, err := startControlPlane(ctx, binDir, work)
	if err != nil {
		return err
	}
	defer cp.Stop()
	names, dyn, err := prepareCluster(ctx, cp, o)
	if err != nil {
		return err
	}
	fmt.Printf("building nodeward and the rpm-ostree double...\n")
	bin, err := sim.BuildProcBinaries(work)
	if err != nil {
		return err
	}

	agentsCtx, stopAgents := context.WithCancel(ctx)
	var agents sync.WaitGroup
	var nodes []*sim.ProcNode
	// Registered before the first agent starts so that those started
	// before a failure stop too; their logs are shown when run fails.
	defer func() {
		stopAgents()
		agents.Wait()
		closeNodes(nodes, o.logs || err != nil)
	}()
	nodes, err = startAgents(agentsCtx, &agents, bin, cp, work, names, o)
	if err != nil {
		return err
	}

	rollout := &demoRollout{cp: cp, nodeward: bin.Nodeward, nodes: len(names), tracker: newTracker(cp.Client(), demoPool)}
	go rollout.tracker.run(agentsCtx)
	fmt.Printf("%d nodes Ready, %d pods running, one nodeward agent process per node on Fedora CoreOS 41\n", len(names), o.pods)
	fmt.Printf("UpdatePool %q: rolling out %s with maxUnavailable %d (download %s, reboot %s)\n\n",
		demoPool, sim.ProcTarget, o.maxUnavailable, o.download, o.reboot)
	rollout.start = time.Now()
	stopCoordinator, err := startCoordinator(bin, cp, work)
	if err != nil {
		return err
	}
	defer stopCoordinator()
	if err := createDemoPool(ctx, dyn, o.maxUnavailable); err != nil {
		return err
	}
	if err := rollout.wait(ctx, o.timeout); err != nil {
		return err
	}
	rollout.showStatus()
	rollout.tracker.summary(os.Stdout, time.Since(rollout.start), o.maxUnavailable)
	if rollout.tracker.maxUnavailable() > o.maxUnavailable {
		return fmt.Errorf("invariant broken: %d nodes unavailable at once", rollout.tracker.maxUnavailable())
	}
	return nil
}

// startControlPlane starts etcd, kube-apiserver, the controllers and kwok
// under work/cp, giving them two minutes to be ready.
func startControlPlane(ctx context.Context, binDir, work string) (*cluster.ControlPlane, error) {
	fmt.Printf("starting the control plane (etcd, kube-apiserver, controller manager, scheduler, kwok)...\n")
	cpDir := filepath.Join(work, "cp")
	if err := os.MkdirAll(cpDir, 0o700); err != nil {
		return nil, err
	}
	startCtx, cancel := context.WithTimeout(ctx, 2*time.Minute)
	defer cancel()
	return cluster.Start(startCtx, cluster.Options{BinDir: binDir, WorkDir: cpDir})
}

// prepareCluster creates the demo's nodes and workload and installs the
// UpdatePool API; it returns the nodes' names and a dynamic client for
// the pool.
func prepareCluster(ctx context.Context, cp *cluster.ControlPlane, o options) ([]string, dynamic.Interface, error) {
	names, err := createNodes(ctx, cp, demoPool, o.nodes)
	if err != nil {
		return nil, nil, err
	}
	if err := startWorkload(ctx, cp, demoPool, o.pods); err != nil {
		return nil, nil, err
	}
	dyn, err := dynamic.NewForConfig(cp.Config())
	if err != nil {
		return nil, nil, err
	}
	if err := cp.InstallCRDs(ctx); err != nil {
		return nil, nil, fmt.Errorf("%w (run the demo from inside the repository)", err)
	}
	return names, dyn, nil
}

// startAgents starts one agent process per node, each on its simulated
// host, and its reboot loop in agents until ctx ends. It returns the nodes
// it started, also those started before an error, for the caller to close.
func startAgents(ctx context.Context, agents *sync.WaitGroup, bin sim.ProcBinaries, cp *cluster.ControlPlane,
	work string, names []string, o options) ([]*sim.ProcNode, error) {
	nodes := make([]*sim.ProcNode, 0, len(names))
	for _, name := range names {
		n, err := sim.NewProcNode(bin, name, cp.KubeconfigPath(), filepath.Join(work, "nodes", name), sim.ProcBooted(), sim.ProcImages())
		if err != nil {
			return nodes, err
		}
		nodes = append(nodes, n)
		n.RebootDelay = o.reboot
		if err := n.Double.Change(func(s *rpmostree.State) { s.PullDelay = o.download }); err != nil {
			return nodes, err
		}
		if err := n.Start(); err != nil {
			return nodes, err
		}
		agents.Go(func() {
			if err := n.RunReboots(ctx); err != nil {
				fmt.Fprintln(os.Stderr, "demo:", err)
			}
		})
	}
	return nodes, nil
}

// closeNodes stops the nodes' agents and, with showLogs, prints the end of
// each agent's log.
func closeNodes(nodes []*sim.ProcNode, showLogs bool) {
	for _, n := range nodes {
		n.Close()
		if showLogs {
			fmt.Printf("--- agent log of %s (end) ---\n%s\n", n.Name, n.LogTail(2500))
		}
	}
}

// startCoordinator starts a `nodeward coordinator` process logging to
// work/coordinator.log; the function it returns kills it and closes the
// log.
func startCoordinator(bin sim.ProcBinaries, cp *cluster.ControlPlane, work string) (stop func(), err error) {
	coord := bin.Coordinator(cp.KubeconfigPath())
	coordLog, err := os.Create(filepath.Join(work, "coordinator.log"))
	if err != nil {
		return nil, err
	}
	coord.Stdout, coord.Stderr = coordLog, coordLog
	if err := coord.Start(); err != nil {
		coordLog.Close()
		return nil, fmt.Errorf("start coordinator: %w", err)
	}
	return func() {
		_ = coord.Process.Kill()
		_ = coord.Wait()
		coordLog.Close()
	}, nil
}

// createDemoPool creates the UpdatePool that moves the demo's nodes to
// sim.ProcTarget.
func createDemoPool(ctx context.Context, dyn dynamic.Interface, maxUnavailable int) error {
	pool := &v1alpha1.UpdatePool{
		ObjectMeta: metav1.ObjectMeta{Name: demoPool},
		Spec: v1alpha1.UpdatePoolSpec{
			NodeSelector:   &metav1.LabelSelector{MatchLabels: map[string]string{cluster.GroupLabel: demoPool}},
			OSImage:        sim.ProcTarget,
			MaxUnavailable: ptr.To(intstr.FromInt(maxUnavailable)),
		},
	}
	return cluster.CreatePool(ctx, dyn, pool)
}

// demoRollout follows the pool's rollout over the demo's nodes.
type demoRollout struct {
	cp       *cluster.ControlPlane
	nodeward string // the nodeward binary, for `nodeward status`
	nodes    int
	tracker  *tracker
	start    time.Time // when the coordinator was started
}

// showStatus prints the `nodeward status` tables of the pool.
func (d *demoRollout) showStatus() {
	out, err := exec.Command(d.nodeward, "status", demoPool, "--kubeconfig", d.cp.KubeconfigPath()).CombinedOutput()
	if err != nil {
		fmt.Printf("nodeward status: %v\n", err)
	}
	fmt.Printf("--- %5.1fs  nodeward status %s ---\n%s\n", time.Since(d.start).Seconds(), demoPool, out)
}

// wait returns once every node is done, printing the progress every
// second, or an error when ctx ends or timeout passes first.
func (d *demoRollout) wait(ctx context.Context, timeout time.Duration) error {
	deadline := time.After(timeout)
	tick := time.NewTicker(time.Second)
	defer tick.Stop()
	var shown string
	var shownAt time.Time
	for {
		select {
		case <-ctx.Done():
			return errors.New("interrupted")
		case <-deadline:
			d.reportTimeout()
			return fmt.Errorf("rollout not done after %s", timeout)
		case <-tick.C:
		}
		// The status tables whenever a node changed step, at most every
		// 3 s; a compact line in between.
		done, steps := d.tracker.progress()
		if done == d.nodes {
			return nil
		}
		if steps != shown && time.Since(shownAt) >= 3*time.Second {
			d.showStatus()
			shown, shownAt = steps, time.Now()
		} else {
			d.tracker.print(os.Stdout, time.Since(d.start))
		}
	}
}

// reportTimeout prints what the nodes wait for, and with DEMO_DEBUG set
// the pods, nodes and PDBs as kubectl shows them.
func (d *demoRollout) reportTimeout() {
	d.showStatus()
	d.tracker.reasons(os.Stdout)
	if os.Getenv("DEMO_DEBUG") != "" {
		out, _ := exec.Command(d.cp.Binary("kubectl"), "--kubeconfig", d.cp.KubeconfigPath(), "get", "pods,nodes,pdb", "-o", "wide").CombinedOutput()
		fmt.Println(string(out))
	}
}

// binDir is $NODEWARD_TESTBIN_DIR or what test/tools/install.sh prints.
func binDir() (string, error) {
	if dir := os.Getenv(cluster.BinDirVariable); dir != "" {
		return dir, nil
	}
	fmt.Println("building or finding the control-plane binaries (test/tools/install.sh)...")
	out, err := exec.Command("bash", "test/tools/install.sh").Output()
	if err != nil {
		return "", fmt.Errorf("test/tools/install.sh (run the demo from the repository root): %w", err)
	}
	lines := strings.Split(strings.TrimSpace(string(out)), "\n")
	return lines[len(lines)-1], nil
}
