package chaos

import (
	"context"
	"flag"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	policyv1 "k8s.io/api/policy/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/intstr"
	"k8s.io/client-go/dynamic"
	"k8s.io/utils/ptr"

	v1alpha1 "github.com/nodeward/nodeward/api/v1alpha1"
	"github.com/nodeward/nodeward/test/cluster"
	"github.com/nodeward/nodeward/test/prom"
	"github.com/nodeward/nodeward/test/rpmostree"
	"github.com/nodeward/nodeward/test/sim"
	"github.com/nodeward/nodeward/test/testenv"
)

var (
	fullFlag = flag.Bool("chaos.full", os.Getenv("NODEWARD_CHAOS_FULL") == "1",
		"run the full size (30 agents, 40 faults) instead of the reduced one; also NODEWARD_CHAOS_FULL=1")
	seedFlag = flag.Int64("chaos.seed", 0,
		"seed of the fault plan, to replay a run (0: $NODEWARD_CHAOS_SEED, else the clock)")
)

// size is the shape of a run.
type size struct {
	name                             string
	controlPlane, workersA, workersB int
	maxA, maxB                       int
	faults, targetChanges            int
	gapMin, gapMax                   time.Duration
	converge                         time.Duration // bound on convergence after the last fault is undone
}

var (
	reducedSize = size{name: "reduced", controlPlane: 3, workersA: 5, workersB: 4, maxA: 2, maxB: 1,
		faults: 18, targetChanges: 3, gapMin: 1500 * time.Millisecond, gapMax: 4 * time.Second, converge: 5 * time.Minute}
	fullSize = size{name: "full", controlPlane: 3, workersA: 14, workersB: 13, maxA: 4, maxB: 3,
		faults: 40, targetChanges: 3, gapMin: 2 * time.Second, gapMax: 6 * time.Second, converge: 20 * time.Minute}
)

const (
	runLabel   = "nodeward.chaos/run"
	runValue   = "chaos"
	cpPool     = "control-plane"
	newImage   = "quay.io/fedora/fedora-coreos:43"
	secondTarg = "ostree-unverified-registry:" + newImage
	workNS     = "chaos-work"
	// soak is pool a's soak and pool b's canary bake.
	soak  = "2s"
	pinNS = "chaos-pin"
)

var (
	secondChecksum = strings.Repeat("2c", 32)
	zones          = []string{"zone-a", "zone-b", "zone-c"}
)

// images is what every host's registry serves: the first target (sim's)
// and the second one a target change switches to.
func images() map[string]rpmostree.Image {
	im := sim.ProcImages()
	im[newImage] = rpmostree.Image{Checksum: secondChecksum, Digest: "sha256:" + strings.Repeat("d", 64), Version: "43.1"}
	return im
}

func checksumOf(target string) string {
	if target == secondTarg {
		return secondChecksum
	}
	return sim.ProcNewChecksum
}

func chooseSeed(t *testing.T) int64 {
	if *seedFlag != 0 {
		return *seedFlag
	}
	if s := os.Getenv("NODEWARD_CHAOS_SEED"); s != "" {
		seed, err := strconv.ParseInt(s, 10, 64)
		if err != nil {
			t.Fatalf("NODEWARD_CHAOS_SEED=%q: %v", s, err)
		}
		return seed
	}
	return time.Now().UnixNano() % 1_000_000_000
}

// TestChaos is the chaos run (docs/reliability.md): real agent processes
// in three zones and three pools (a control-plane pool and two worker
// pools), two coordinator replicas electing a leader, a rollout to a new
// OS image, faults injected from a seeded plan, and an independent watcher
// checking the invariants throughout. It passes when the rollout
// converges (every node Done on its pool's final target, booted into it,
// schedulable, no grant, no cordon record, no hook) and the watcher
// recorded no violation.
func TestChaos(t *testing.T) {
	sz := reducedSize
	if *fullFlag {
		sz = fullSize
	}
	seed := chooseSeed(t)
	replay := fmt.Sprintf("go test ./test/chaos -run 'TestChaos$' -v -timeout 40m -chaos.seed=%d", seed)
	if *fullFlag {
		replay += " -chaos.full"
	}
	t.Logf("chaos seed %d, size %s; replay: %s", seed, sz.name, replay)
	testenv.RequireBinary(t, "dbus-daemon")
	log := logf(t)
	began := time.Now()

	cp := startControlPlane(t)
	// The agents' hosts and logs and the coordinators' logs are kept when
	// the run fails, beside the control plane's.
	runDir, err := os.MkdirTemp("", "nodeward-chaos-")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		if t.Failed() {
			t.Logf("agent hosts and logs, coordinator logs kept in %s", runDir)
		} else {
			os.RemoveAll(runDir)
		}
	})
	bin, err := sim.BuildProcBinaries(t.TempDir())
	if err != nil {
		t.Fatal(err)
	}
	dyn, err := dynamic.NewForConfig(cp.Config())
	if err != nil {
		t.Fatal(err)
	}
	ctx := context.Background()
	if err := cp.InstallCRDs(ctx); err != nil {
		t.Fatal(err)
	}

	// Nodes: control-plane nodes and two worker groups, round-robin over
	// three zones.
	cpNodes := cp.CreateNodes(t, cluster.NodeSpec{Prefix: "cp", Count: sz.controlPlane, Zones: zones, Role: "control-plane"})
	workersA := cp.CreateNodes(t, cluster.NodeSpec{Prefix: "wa", Count: sz.workersA, Zones: zones, Role: "worker",
		Labels: map[string]string{PoolLabel: "a"}})
	workersB := cp.CreateNodes(t, cluster.NodeSpec{Prefix: "wb", Count: sz.workersB, Zones: zones, Role: "worker",
		Labels: map[string]string{PoolLabel: "b"}})
	workers := append(append([]string(nil), workersA...), workersB...)
	all := append(append([]string(nil), cpNodes...), workers...)
	workload(t, cp, len(all))

	// Every goroutine of the run (watcher, machines, replicas) ends with
	// runCtx; each cleanup stops them all first, so that nothing restarts
	// an agent or a coordinator while the cleanups tear things down.
	runCtx, stopRun := context.WithCancel(ctx)
	var wg sync.WaitGroup
	stopAll := sync.OnceFunc(func() { stopRun(); wg.Wait() })
	t.Cleanup(stopAll)

	w := NewWatcher(WatcherOptions{Client: cp.Client(), Dynamic: dyn, PoolSelector: runLabel + "=" + runValue, Log: log})
	wg.Go(func() { w.Run(runCtx) })
	{
		sctx, cancel := context.WithTimeout(ctx, time.Minute)
		err := w.WaitSynced(sctx)
		cancel()
		if err != nil {
			t.Fatal(err)
		}
	}

	machines := map[string]*Machine{}
	for _, name := range all {
		n, err := sim.NewProcNode(bin, name, cp.KubeconfigPath(), filepath.Join(runDir, name), sim.ProcBooted(), images())
		if err != nil {
			t.Fatal(err)
		}
		n.RebootDelay = 500 * time.Millisecond
		n.Args = []string{"--update-poll-interval", "1s"}
		m := NewMachine(n, w, log)
		machines[name] = m
		wg.Go(func() {
			if err := m.Run(runCtx); err != nil {
				t.Errorf("machine %s: %v", name, err)
			}
		})
		t.Cleanup(func() {
			stopAll()
			if t.Failed() {
				t.Logf("agent log of %s (tail):\n%s", name, n.LogTail(2500))
			}
			n.Close()
		})
	}
	cluster.WaitFor(t, 3*time.Minute, "every agent's liveness Lease", func(ctx context.Context) (bool, error) {
		leases, err := cp.Client().CoordinationV1().Leases(v1alpha1.AgentLeaseNamespace).List(ctx, metav1.ListOptions{})
		if err != nil {
			return false, err
		}
		have := map[string]bool{}
		for _, l := range leases.Items {
			have[l.Name] = true
		}
		for _, n := range all {
			if !have[v1alpha1.AgentLeaseName(n)] {
				return false, fmt.Errorf("no Lease for %s yet", n)
			}
		}
		return true, nil
	})

	coordLogs := runDir
	var replicas []*Replica
	for i := range 2 {
		name := fmt.Sprintf("coordinator-%d", i)
		// JSON logs: the replica reads its leadership from them (the
		// default text format left every kill-leader skipped).
		r := NewReplica(name, coordLogs, func() *exec.Cmd {
			return bin.Coordinator(cp.KubeconfigPath(), "--log-format", "json", "--pool-selector", runLabel+"="+runValue,
				"--leader-election-namespace", v1alpha1.AgentLeaseNamespace, "--leader-lease-duration", "10s")
		}, log)
		replicas = append(replicas, r)
		wg.Go(func() {
			if err := r.Run(runCtx); err != nil {
				t.Errorf("replica %s: %v", name, err)
			}
		})
	}
	t.Cleanup(func() {
		stopAll()
		if t.Failed() {
			for _, r := range replicas {
				t.Logf("log of %s (tail):\n%s", r.Name, tail(filepath.Join(coordLogs, r.Name+".log"), 3000))
			}
		}
	})

	// Every pool's gate: a real Prometheus scraping a series per pool.
	pools := map[string]string{"a": "workers-a", "b": "workers-b"}
	target := prom.NewTarget(t)
	gate := NewGateSignal(target, prom.StartPrometheus(t, prom.PrometheusOptions{Targets: []string{target.Addr()}}),
		[]string{cpPool, pools["a"], pools["b"]}, NodewardResume(bin.Nodeward, cp.KubeconfigPath()))

	// The rollout.
	setup := time.Since(began)
	rolloutStart := time.Now()
	createPool(t, dyn, cpPool, &metav1.LabelSelector{MatchExpressions: []metav1.LabelSelectorRequirement{
		{Key: controlPlaneLabel, Operator: metav1.LabelSelectorOpExists}}}, 2, func(s *v1alpha1.UpdatePoolSpec) {
		s.ControlPlane, s.Gates = true, gate.Gates(cpPool)
	})
	// Pool a soaks each node and retries a blocked drain; pool b bakes a
	// canary and forces a blocked drain (DrainPolicy switches them).
	createPool(t, dyn, pools["a"], &metav1.LabelSelector{MatchLabels: map[string]string{PoolLabel: "a"}}, sz.maxA,
		func(s *v1alpha1.UpdatePoolSpec) {
			s.Soak, s.Gates = soak, gate.Gates(pools["a"])
			s.Drain = &v1alpha1.DrainSpec{Timeout: drainTimeout, OnTimeout: "Retry"}
		})
	createPool(t, dyn, pools["b"], &metav1.LabelSelector{MatchLabels: map[string]string{PoolLabel: "b"}}, sz.maxB,
		func(s *v1alpha1.UpdatePoolSpec) {
			s.Canary, s.Gates = &v1alpha1.Canary{Nodes: ptr.To(intstr.FromInt(1)), Bake: soak}, gate.Gates(pools["b"])
			s.Drain = &v1alpha1.DrainSpec{Timeout: drainTimeout, OnTimeout: "Force"}
		})
	cluster.WaitFor(t, 3*time.Minute, "a first grant", func(context.Context) (bool, error) {
		for _, v := range w.Nodes() {
			if v.Grant != "" {
				return true, nil
			}
		}
		return false, nil
	})
	firstGrant := time.Since(rolloutStart)

	// The faults.
	plan := Plan(seed, sz.faults, sz.targetChanges, sz.gapMin, sz.gapMax)
	in := &Injector{CP: cp, Client: cp.Client(), Dynamic: dyn, Watcher: w, Machines: machines, Replicas: replicas,
		Workers: workers, WorkerPools: pools, Pools: []string{cpPool, pools["a"], pools["b"]}, NewTarget: secondTarg,
		PinNamespace: pinNS, Gate: gate, Log: log}
	faultsStart := time.Now()
	records, err := in.Run(runCtx, plan)
	if err != nil {
		t.Fatalf("seed %d: fault injection: %v", seed, err)
	}
	lastInjected, lastUndone := faultsStart, faultsStart
	for _, r := range records {
		lastInjected = later(lastInjected, r.At)
		lastUndone = later(lastUndone, r.At)
		if !r.Undone.IsZero() {
			lastUndone = later(lastUndone, r.Undone)
		}
	}

	// Convergence.
	var why string
	settled := func() bool {
		for _, v := range w.Nodes() {
			if !v.Settled() {
				why = fmt.Sprintf("%s: pool %q state %s on %q (pool target %q) grant %q cordon record %v unschedulable %v hooks %d",
					v.Name, v.Pool, v.State, v.StateTarget, v.PoolTarget, v.Grant, v.CordonRecord, v.Unschedulable, v.Hooks)
				return false
			}
			s, err := rpmostree.Load(machines[v.Name].Node.Double.Dir)
			if err != nil {
				why = err.Error()
				return false
			}
			booted, err := s.BootedDeployment()
			if err != nil || booted.Checksum != checksumOf(v.PoolTarget) {
				why = fmt.Sprintf("%s: booted %v (%v), want the checksum of %s", v.Name, booted, err, v.PoolTarget)
				return false
			}
		}
		return true
	}
	deadline := time.Now().Add(sz.converge)
	for !settled() && time.Now().Before(deadline) {
		sleep(runCtx, time.Second)
	}
	converged := settled()
	convergedAt := time.Now()

	// The end state, read from the API rather than the watcher.
	verifyEnd(t, cp, w)

	violations := w.Violations()
	summary := summarize(sz, seed, replay, len(all), setup, firstGrant, rolloutStart, faultsStart, lastInjected, lastUndone,
		convergedAt, converged, records, violations, w.Stats(), machines, replicas)
	t.Log("\n" + summary)
	if path := os.Getenv("NODEWARD_CHAOS_SUMMARY"); path != "" {
		if err := os.WriteFile(path, []byte(summary), 0o644); err != nil {
			t.Error(err)
		}
	}
	for _, v := range violations {
		t.Errorf("seed %d: VIOLATION %s", seed, v)
	}
	if !converged {
		t.Errorf("seed %d: the rollout did not converge within %s of the last fault's undo: %s%s", seed, sz.converge, why, halts(in))
	}
	if t.Failed() {
		t.Logf("replay: %s", replay)
	}
}

// halts lists the pools left halted, for a run that did not converge.
func halts(in *Injector) string {
	var out string
	for _, name := range in.Pools {
		p, err := in.pool(context.Background(), name)
		if err != nil {
			out += fmt.Sprintf("; pool %s: %v", name, err)
		} else if h := p.Annotations[v1alpha1.AnnotationHalted]; h != "" {
			out += fmt.Sprintf("; pool %s halted: %s", name, h)
		}
	}
	return out
}

func later(a, b time.Time) time.Time {
	if b.After(a) {
		return b
	}
	return a
}

// workload runs one pod per node (a Deployment spread by hostname, 1 s
// grace) under a PDB keeping a third of them (unhealthy pods always
// evictable), so every drain has something to evict, and
// creates the namespace of the PDB-blocking pods.
func workload(t *testing.T, cp *cluster.ControlPlane, replicas int) {
	t.Helper()
	ctx := context.Background()
	client := cp.Client()
	for _, ns := range []string{workNS, pinNS} {
		if _, err := client.CoreV1().Namespaces().Create(ctx, &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: ns}}, metav1.CreateOptions{}); err != nil {
			t.Fatal(err)
		}
		cluster.WaitFor(t, time.Minute, "default ServiceAccount in "+ns, func(ctx context.Context) (bool, error) {
			_, err := client.CoreV1().ServiceAccounts(ns).Get(ctx, "default", metav1.GetOptions{})
			return err == nil, nil
		})
	}
	labels := map[string]string{"app": "web"}
	d := &appsv1.Deployment{
		ObjectMeta: metav1.ObjectMeta{Name: "web", Namespace: workNS},
		Spec: appsv1.DeploymentSpec{
			Replicas: ptr.To(int32(replicas)),
			Selector: &metav1.LabelSelector{MatchLabels: labels},
			Template: corev1.PodTemplateSpec{
				ObjectMeta: metav1.ObjectMeta{Labels: labels},
				Spec: corev1.PodSpec{
					TerminationGracePeriodSeconds: ptr.To[int64](1),
					TopologySpreadConstraints: []corev1.TopologySpreadConstraint{{
						MaxSkew: 1, TopologyKey: "kubernetes.io/hostname", WhenUnsatisfiable: corev1.ScheduleAnyway,
						LabelSelector: &metav1.LabelSelector{MatchLabels: labels},
					}},
					Containers: []corev1.Container{{Name: "web", Image: "registry.invalid/web:1"}},
				},
			},
		},
	}
	if _, err := client.AppsV1().Deployments(workNS).Create(ctx, d, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	pdb := &policyv1.PodDisruptionBudget{
		ObjectMeta: metav1.ObjectMeta{Name: "web", Namespace: workNS},
		// An integer minAvailable counts the pods that exist, not the
		// Deployment's scale: after API server restarts the real
		// ReplicaSet controller once stopped replacing evicted pods for
		// over 20 minutes (15 of 30; finding 5), and a percentage or
		// maxUnavailable budget then allowed no disruption at all.
		Spec: policyv1.PodDisruptionBudgetSpec{MinAvailable: ptr.To(intstr.FromInt(replicas / 3)),
			Selector: &metav1.LabelSelector{MatchLabels: labels},
			// A crash of etcd or the API server can make the node
			// lifecycle controller mark every pod not Ready, and kwok
			// never marks them Ready again: with the default policy the
			// budget would then refuse every eviction for good.
			UnhealthyPodEvictionPolicy: ptr.To(policyv1.AlwaysAllow)},
	}
	if _, err := client.PolicyV1().PodDisruptionBudgets(workNS).Create(ctx, pdb, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	cluster.WaitFor(t, 2*time.Minute, "deployment web available", func(ctx context.Context) (bool, error) {
		d, err := client.AppsV1().Deployments(workNS).Get(ctx, "web", metav1.GetOptions{})
		return err == nil && d.Status.AvailableReplicas == int32(replicas), err
	})
}

func createPool(t *testing.T, dyn dynamic.Interface, name string, sel *metav1.LabelSelector, maxUnavailable int,
	more func(*v1alpha1.UpdatePoolSpec)) {
	t.Helper()
	pool := &v1alpha1.UpdatePool{
		ObjectMeta: metav1.ObjectMeta{Name: name, Labels: map[string]string{runLabel: runValue}},
		Spec: v1alpha1.UpdatePoolSpec{NodeSelector: sel, OSImage: sim.ProcTarget,
			MaxUnavailable: ptr.To(intstr.FromInt(maxUnavailable))},
	}
	more(&pool.Spec)
	if err := cluster.CreatePool(context.Background(), dyn, pool); err != nil {
		t.Fatal(err)
	}
}

// verifyEnd reads every node from the API: no grant, no cordon record,
// schedulable, Done on its pool's target (as the watcher knows the pool).
func verifyEnd(t *testing.T, cp *cluster.ControlPlane, w *Watcher) {
	t.Helper()
	targets := map[string]string{}
	for _, v := range w.Nodes() {
		targets[v.Name] = v.PoolTarget
	}
	var list *corev1.NodeList
	cluster.WaitFor(t, time.Minute, "the final list of nodes", func(ctx context.Context) (bool, error) {
		var err error
		list, err = cp.Client().CoreV1().Nodes().List(ctx, metav1.ListOptions{})
		return err == nil, err
	})
	for _, n := range list.Items {
		a := n.Annotations
		_, record := a[keyCordonedBy]
		if a[keyGrant] != "" || record || n.Spec.Unschedulable || a[keyState] != "Done" || a[keyStateTarget] != targets[n.Name] {
			t.Errorf("end state of %s: grant %q, cordon record %v, unschedulable %v, state %s on %q (pool target %q), reason %q",
				n.Name, a[keyGrant], record, n.Spec.Unschedulable, a[keyState], a[keyStateTarget], targets[n.Name],
				a["update.nodeward.io/reason"])
		}
	}
}

func tail(path string, n int64) string {
	data, err := os.ReadFile(path)
	if err != nil {
		return err.Error()
	}
	if int64(len(data)) > n {
		data = data[int64(len(data))-n:]
	}
	return string(data)
}
