package e2e

import (
	"context"
	"fmt"
	"io"
	"os"
	"os/exec"
	"sync"
	"syscall"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/intstr"
	"k8s.io/utils/ptr"

	v1alpha1 "github.com/nodeward/nodeward/api/v1alpha1"
	"github.com/nodeward/nodeward/test/cluster"
	"github.com/nodeward/nodeward/test/coordinatortest"
	"github.com/nodeward/nodeward/test/rpmostree"
	"github.com/nodeward/nodeward/test/sim"
	"github.com/nodeward/nodeward/test/testenv"
)

var procBinaries = sync.OnceValues(func() (sim.ProcBinaries, error) {
	dir, err := os.MkdirTemp("", "nodeward-proc-bin-")
	if err != nil {
		return sim.ProcBinaries{}, err
	}
	return sim.BuildProcBinaries(dir)
})

// procPool is a pool whose agents are `nodeward agent` processes.
type procPool struct {
	*pool
	procs map[string]*sim.ProcNode
}

func newProcPool(t *testing.T, prefix string, count, maxUnavailable int) *procPool {
	t.Helper()
	return newProcPoolServing(t, prefix, count, maxUnavailable, sim.ProcImages)
}

// newProcPoolServing is newProcPool with each node's fake registry serving
// what images returns (a fresh map per node: each double keeps its own).
func newProcPoolServing(t *testing.T, prefix string, count, maxUnavailable int, images func() map[string]rpmostree.Image) *procPool {
	t.Helper()
	testenv.RequireBinary(t, "dbus-daemon")
	bin, err := procBinaries()
	if err != nil {
		t.Fatal(err)
	}
	cp := env.ControlPlane(t)
	names := cp.CreateNodes(t, cluster.NodeSpec{Prefix: prefix, Count: count})
	p := &procPool{pool: &pool{t: t, cp: cp, prefix: prefix, names: names, nodes: map[string]*sim.SimNode{},
		maxUnavailable: maxUnavailable,
		ignore:         map[string]bool{}, seen: map[string][]v1alpha1.Step{}}, procs: map[string]*sim.ProcNode{}}
	ctx, cancel := context.WithCancel(context.Background())
	factory := p.watch(ctx)
	for _, name := range names {
		n, err := sim.NewProcNode(bin, name, cp.KubeconfigPath(), t.TempDir(), sim.ProcBooted(), images())
		if err != nil {
			t.Fatal(err)
		}
		n.RebootDelay = 500 * time.Millisecond
		p.procs[name] = n
	}
	sim.RunMachines(t, p.procs)
	t.Cleanup(func() {
		cancel()
		factory.Shutdown()
	})
	return p
}

func (p *procPool) startAgents() {
	p.t.Helper()
	for _, n := range p.procs {
		if err := n.Start(); err != nil {
			p.t.Fatal(err)
		}
	}
}

// assertUpdated: Done on the target, booted into the new deployment after
// exactly one boot, finalized once, schedulable, no cordon record.
func (p *procPool) assertUpdated(name string) {
	p.t.Helper()
	n, err := p.node(context.Background(), name)
	if err != nil {
		p.t.Fatal(err)
	}
	s, err := rpmostree.Load(p.procs[name].Double.Dir)
	if err != nil {
		p.t.Fatal(err)
	}
	booted, err := s.BootedDeployment()
	if err != nil {
		p.t.Fatal(err)
	}
	finalizes := s.CallCount("finalize-deployment")
	_, record := n.Annotations[v1alpha1.AnnotationCordonedBy]
	if n.Annotations[v1alpha1.AnnotationState] != string(v1alpha1.StepDone) || booted.Checksum != sim.ProcNewChecksum || s.Boots != 1 ||
		finalizes != 1 || n.Spec.Unschedulable || record {
		p.t.Errorf("%s: state %s, booted %s after %d boots and %d finalize calls, unschedulable %v, cordon record %v; steps %v",
			name, n.Annotations[v1alpha1.AnnotationState], booted.Checksum, s.Boots, finalizes, n.Spec.Unschedulable, record, p.steps(name))
	}
}

// TestProcessKill9AndResume kills the agent process with SIGKILL at the
// riskiest points of the cycle and starts a new process from the state
// directory: the node still ends on the target after exactly one boot and
// one finalize, uncordoned, and was cordoned at every kill.
func TestProcessKill9AndResume(t *testing.T) {
	t.Parallel()
	cases := []struct {
		name string
		at   v1alpha1.Step
		// reason, when set, must show in the node's reason before the kill.
		reason string
		// setup holds the node at the kill point; release lets it go on.
		setup func(p *procPool, name, ns string) (release func())
		// boots is the host's boot count at the kill.
		boots int
	}{
		{name: "after-cordon", at: v1alpha1.StepDraining, boots: 0,
			setup: func(p *procPool, name, ns string) func() { return blockDrain(p.pool, name, ns) }},
		{name: "mid-drain", at: v1alpha1.StepDraining, reason: "drain blocked", boots: 0,
			setup: func(p *procPool, name, ns string) func() { return blockDrain(p.pool, name, ns) }},
		{name: "after-finalize-before-reboot", at: v1alpha1.StepRebooting, boots: 0,
			setup: func(p *procPool, name, ns string) func() {
				p.procs[name].HoldReboots(true) // the machine is slow to go down
				return func() { p.procs[name].HoldReboots(false) }
			}},
		{name: "after-boot-before-uncordon", at: v1alpha1.StepWaitingHealthy, reason: "no pod matching", boots: 1,
			setup: func(p *procPool, name, ns string) func() {
				// The post-update check waits for a pod (a CNI
				// DaemonSet's, say) that only the release creates.
				p.procs[name].Args = []string{"--post-update-pods", "nodeward.test/post-update=" + name}
				return func() { postUpdatePod(p.pool, ns, name) }
			}},
	}
	for i, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			t.Parallel()
			p := newProcPool(t, fmt.Sprintf("pkill%d", i), 1, 1)
			name := p.names[0]
			ns := p.cp.Namespace(t)
			release := c.setup(p, name, ns)
			p.startAgents()
			p.grant(sim.ProcTarget, 1, 0)
			p.waitStep(name, c.at, 2*time.Minute)
			if c.reason != "" {
				p.waitReason(name, c.reason)
			}
			if c.at == v1alpha1.StepRebooting {
				cluster.WaitFor(t, time.Minute, "finalize-deployment to ask for the reboot", func(context.Context) (bool, error) {
					s, err := rpmostree.Load(p.procs[name].Double.Dir)
					return err == nil && s.RebootRequested, err
				})
			}
			node := p.procs[name]
			node.Kill()
			mustBeCordoned(t, p.pool, name)
			if boots, err := node.Boots(); err != nil || boots != c.boots {
				t.Fatalf("%s at the kill: %d boots (%v), want %d", name, boots, err, c.boots)
			}
			if err := node.Start(); err != nil {
				t.Fatal(err)
			}
			release()
			p.waitStep(name, v1alpha1.StepDone, 2*time.Minute)
			p.assertUpdated(name)
		})
	}
}

// postUpdatePod runs a pod on node labelled for --post-update-pods; kwok
// makes it Running and Ready.
func postUpdatePod(p *pool, ns, node string) {
	p.t.Helper()
	pod := &corev1.Pod{
		ObjectMeta: metav1.ObjectMeta{Name: "post-update-" + node, Namespace: ns,
			Labels: map[string]string{"nodeward.test/post-update": node}},
		Spec: corev1.PodSpec{
			NodeName:    node,
			Containers:  []corev1.Container{{Name: "c", Image: "registry.invalid/c:1"}},
			Tolerations: []corev1.Toleration{{Operator: corev1.TolerationOpExists}},
		},
	}
	if _, err := p.cp.Client().CoreV1().Pods(ns).Create(context.Background(), pod, metav1.CreateOptions{}); err != nil {
		p.t.Fatal(err)
	}
}

// TestProcessRolloutSurvivesCoordinatorKill: four agent processes, the
// coordinator as a process; the coordinator is killed with SIGKILL while
// nodes hold slots and a new one takes over. The rollout completes and no
// event shows more than maxUnavailable nodes unavailable.
func TestProcessRolloutSurvivesCoordinatorKill(t *testing.T) {
	t.Parallel()
	const maxUnavailable = 2
	p := newProcPool(t, "pcoord", 4, maxUnavailable)
	dyn := installPoolAPI(t, p.cp)
	p.startAgents()
	cluster.WaitFor(t, time.Minute, "every agent to renew its Lease", func(ctx context.Context) (bool, error) {
		for _, name := range p.names {
			if _, err := p.cp.Client().CoordinationV1().Leases(v1alpha1.AgentLeaseNamespace).Get(ctx, v1alpha1.AgentLeaseName(name), metav1.GetOptions{}); err != nil {
				return false, nil
			}
		}
		return true, nil
	})
	bin, _ := procBinaries()
	leaderNS := p.cp.Namespace(t)
	coordinator := func() *exec.Cmd {
		cmd := bin.Coordinator(p.cp.KubeconfigPath(), "--pool-selector", coordinatortest.PoolLabel+"=pcoord",
			"--leader-election-namespace", leaderNS, "--leader-lease-duration", "6s")
		cmd.Stdout, cmd.Stderr = io.Discard, io.Discard
		if testing.Verbose() {
			cmd.Stderr = os.Stderr
		}
		if err := cmd.Start(); err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { _ = cmd.Process.Kill(); _ = cmd.Wait() })
		return cmd
	}
	first := coordinator()
	p.createPool(dyn, v1alpha1.UpdatePoolSpec{OSImage: sim.ProcTarget, MaxUnavailable: ptr.To(intstr.FromInt(maxUnavailable))})
	cluster.WaitFor(t, 2*time.Minute, "a node to hold a slot", func(ctx context.Context) (bool, error) {
		for _, name := range p.names {
			n, err := p.node(ctx, name)
			if err != nil {
				return false, err
			}
			if _, granted := n.Annotations[v1alpha1.AnnotationGrant]; granted {
				return true, nil
			}
		}
		return false, nil
	})
	if err := first.Process.Signal(syscall.SIGKILL); err != nil {
		t.Fatal(err)
	}
	_ = first.Wait()
	coordinator()
	p.waitAllDone(3 * time.Minute)
	for _, name := range p.names {
		p.assertUpdated(name)
	}
	p.mu.Lock()
	defer p.mu.Unlock()
	t.Logf("maximum unavailable observed: %d", p.maxSeen)
}
