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
	fmt.Printf("starting the control plane (etcd, kube-apiserver, controller manager, scheduler, kwok)...\n")
	cpDir := filepath.Join(work, "cp")
	if err := os.MkdirAll(cpDir, 0o700); err != nil {
		return err
	}
	startCtx, cancel := context.WithTimeout(ctx, 2*time.Minute)
	cp, err := cluster.Start(startCtx, cluster.Options{BinDir: binDir, WorkDir: cpDir})
	cancel()
	if err != nil {
		return err
	}
	defer cp.Stop()

	const group = "demo"
	names, err := createNodes(ctx, cp, group, o.nodes)
	if err != nil {
		return err
	}
	if err := startWorkload(ctx, cp, group, o.pods); err != nil {
		return err
	}
	dyn, err := dynamic.NewForConfig(cp.Config())
	if err != nil {
		return err
	}
	if err := cp.InstallCRDs(ctx); err != nil {
		return fmt.Errorf("%w (run the demo from inside the repository)", err)
	}
	fmt.Printf("building nodeward and the rpm-ostree double...\n")
	bin, err := sim.BuildProcBinaries(work)
	if err != nil {
		return err
	}
	agentsCtx, stopAgents := context.WithCancel(ctx)
	var wg sync.WaitGroup
	nodes := make([]*sim.ProcNode, 0, len(names))
	defer func() {
		stopAgents()
		wg.Wait()
		for _, n := range nodes {
			n.Close()
			if o.logs || err != nil {
				fmt.Printf("--- agent log of %s (end) ---\n%s\n", n.Name, n.LogTail(2500))
			}
		}
	}()
	for _, name := range names {
		n, err := sim.NewProcNode(bin, name, cp.KubeconfigPath(), filepath.Join(work, "nodes", name), sim.ProcBooted(), sim.ProcImages())
		if err != nil {
			return err
		}
		nodes = append(nodes, n)
		n.RebootDelay = o.reboot
		if err := n.Double.Change(func(s *rpmostree.State) { s.PullDelay = o.download }); err != nil {
			return err
		}
		if err := n.Start(); err != nil {
			return err
		}
		wg.Go(func() {
			if err := n.RunReboots(agentsCtx); err != nil {
				fmt.Fprintln(os.Stderr, "demo:", err)
			}
		})
	}

	tracker := newTracker(cp.Client(), group)
	go tracker.run(agentsCtx)
	fmt.Printf("%d nodes Ready, %d pods running, one nodeward agent process per node on Fedora CoreOS 41\n", len(names), o.pods)
	fmt.Printf("UpdatePool %q: rolling out %s with maxUnavailable %d (download %s, reboot %s)\n\n",
		group, sim.ProcTarget, o.maxUnavailable, o.download, o.reboot)
	start := time.Now()
	coord := bin.Coordinator(cp.KubeconfigPath())
	coordLog, err := os.Create(filepath.Join(work, "coordinator.log"))
	if err != nil {
		return err
	}
	defer coordLog.Close()
	coord.Stdout, coord.Stderr = coordLog, coordLog
	if err := coord.Start(); err != nil {
		return fmt.Errorf("start coordinator: %w", err)
	}
	defer func() { _ = coord.Process.Kill(); _ = coord.Wait() }()
	pool := &v1alpha1.UpdatePool{
		ObjectMeta: metav1.ObjectMeta{Name: group},
		Spec: v1alpha1.UpdatePoolSpec{
			NodeSelector:   &metav1.LabelSelector{MatchLabels: map[string]string{cluster.GroupLabel: group}},
			OSImage:        sim.ProcTarget,
			MaxUnavailable: ptr.To(intstr.FromInt(o.maxUnavailable)),
		},
	}
	if err := cluster.CreatePool(ctx, dyn, pool); err != nil {
		return err
	}
	status := func() {
		out, err := exec.Command(bin.Nodeward, "status", group, "--kubeconfig", cp.KubeconfigPath()).CombinedOutput()
		if err != nil {
			fmt.Printf("nodeward status: %v\n", err)
		}
		fmt.Printf("--- %5.1fs  nodeward status %s ---\n%s\n", time.Since(start).Seconds(), group, out)
	}

	deadline := time.After(o.timeout)
	tick := time.NewTicker(time.Second)
	defer tick.Stop()
	var shown string
	var shownAt time.Time
	for {
		select {
		case <-ctx.Done():
			return errors.New("interrupted")
		case <-deadline:
			status()
			tracker.reasons(os.Stdout)
			if os.Getenv("DEMO_DEBUG") != "" {
				out, _ := exec.Command(cp.Binary("kubectl"), "--kubeconfig", cp.KubeconfigPath(), "get", "pods,nodes,pdb", "-o", "wide").CombinedOutput()
				fmt.Println(string(out))
			}
			return fmt.Errorf("rollout not done after %s", o.timeout)
		case <-tick.C:
		}
		// The status tables whenever a node changed step, at most every
		// 3 s; a compact line in between.
		done, steps := tracker.progress()
		if done == len(names) {
			break
		}
		if steps != shown && time.Since(shownAt) >= 3*time.Second {
			status()
			shown, shownAt = steps, time.Now()
		} else {
			tracker.print(os.Stdout, time.Since(start))
		}
	}
	status()
	makespan := time.Since(start)
	tracker.summary(os.Stdout, makespan, o.maxUnavailable)
	if tracker.maxUnavailable() > o.maxUnavailable {
		return fmt.Errorf("invariant broken: %d nodes unavailable at once", tracker.maxUnavailable())
	}
	return nil
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
