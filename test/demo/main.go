// Command demo rolls a new OS out over simulated nodes on a real local
// control plane: etcd, kube-apiserver, the controllers and kwok nodes, one
// nodeward update agent per node on its own simulated rpm-ostree host, real
// pods under a PDB that the drains evict, nodeward's coordinator and an
// UpdatePool. It prints live progress and a summary, and stops everything it
// started before it exits (also on Ctrl-C).
//
//	NODEWARD_TESTBIN_DIR=... go run ./test/demo -nodes 6 -max-unavailable 2
package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"log/slog"
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
	"github.com/nodeward/nodeward/coordinator"
	"github.com/nodeward/nodeward/test/cluster"
	"github.com/nodeward/nodeward/test/e2e"
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
	flag.BoolVar(&o.logs, "agent-logs", false, "print the agents' logs")
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

func run(ctx context.Context, o options) error {
	binDir, err := binDir()
	if err != nil {
		return err
	}
	work, err := os.MkdirTemp("", "nodeward-demo-")
	if err != nil {
		return err
	}
	defer os.RemoveAll(work)
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
	if err := e2e.InstallPoolAPI(ctx, cp.Client(), dyn, "manifests/crds/nodeward.io_updatepools.yaml"); err != nil {
		return fmt.Errorf("%w (run the demo from the repository root)", err)
	}
	if err := e2e.CreateAgentLeases(ctx, cp.Client(), names); err != nil {
		return err
	}
	log := slog.New(slog.NewTextHandler(io.Discard, nil))
	if o.logs {
		log = slog.New(slog.NewTextHandler(os.Stderr, nil))
	}
	agentsCtx, stopAgents := context.WithCancel(ctx)
	var wg sync.WaitGroup
	nodes := make([]*e2e.SimNode, len(names))
	for i, name := range names {
		host := e2e.NewSimHost("os-1")
		host.StageDelay = o.download
		nodes[i] = &e2e.SimNode{Name: name, Host: host, StateDir: filepath.Join(work, "state", name),
			Client: cp.Client(), Log: log, RebootDelay: o.reboot}
		if err := nodes[i].Start(); err != nil {
			stopAgents()
			return err
		}
		wg.Go(func() { nodes[i].RunReboots(agentsCtx) })
	}
	defer func() {
		stopAgents()
		wg.Wait()
		for _, n := range nodes {
			n.Kill()
		}
	}()

	tracker := newTracker(cp.Client(), group)
	go tracker.run(agentsCtx)
	fmt.Printf("%d nodes Ready, %d pods running, one agent per node on os-1\n", len(names), o.pods)
	fmt.Printf("UpdatePool %q: rolling out os-2 with maxUnavailable %d (download %s, reboot %s)\n\n", group, o.maxUnavailable, o.download, o.reboot)
	start := time.Now()
	coord := coordinator.New(coordinator.Options{Client: cp.Client(), Dynamic: dyn, Resync: time.Second, Log: log})
	wg.Go(func() {
		if err := coord.Run(agentsCtx); err != nil && agentsCtx.Err() == nil {
			fmt.Fprintln(os.Stderr, "demo: coordinator:", err)
		}
	})
	pool := &v1alpha1.UpdatePool{
		ObjectMeta: metav1.ObjectMeta{Name: group},
		Spec: v1alpha1.UpdatePoolSpec{
			NodeSelector:   &metav1.LabelSelector{MatchLabels: map[string]string{cluster.GroupLabel: group}},
			OSImage:        "os-2",
			MaxUnavailable: ptr.To(intstr.FromInt(o.maxUnavailable)),
		},
	}
	if err := e2e.CreatePool(ctx, dyn, pool); err != nil {
		return err
	}

	deadline := time.After(o.timeout)
	tick := time.NewTicker(time.Second)
	defer tick.Stop()
	for {
		select {
		case <-ctx.Done():
			return errors.New("interrupted")
		case <-deadline:
			tracker.print(os.Stdout, time.Since(start))
			tracker.reasons(os.Stdout)
			if os.Getenv("DEMO_DEBUG") != "" {
				out, _ := exec.Command(cp.Binary("kubectl"), "--kubeconfig", cp.KubeconfigPath(), "get", "pods,nodes,pdb", "-o", "wide").CombinedOutput()
				fmt.Println(string(out))
				out, _ = exec.Command(cp.Binary("kubectl"), "--kubeconfig", cp.KubeconfigPath(), "describe", "nodes").CombinedOutput()
				fmt.Println(string(out))
			}
			return fmt.Errorf("rollout not done after %s", o.timeout)
		case <-tick.C:
		}
		done := tracker.print(os.Stdout, time.Since(start))
		if done == len(names) {
			break
		}
	}
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
