// Command coordinator benchmarks `nodeward coordinator` at scale on the real
// control plane: thousands of Node objects (no kubelet; the node lifecycle
// controller is off so they stay Ready), one pool with maxUnavailable 1 and a
// simulated agent that finishes each update at once, with the real agent's
// report of Done, and every node's agent Lease renewed as the agents
// renew them (-lease-renewal). It measures the time
// from a slot freeing (the agent's Done written) to the next grant seen in a
// watch, the coordinator process's RSS, its API requests per grant by HTTP
// method, its start-up (process start to the first grant: informers synced
// and the first full plan written) and the API server's own request rate
// (apiserver_request_total, every client) during the grants.
//
//	NODEWARD_TESTBIN_DIR=... go run ./test/bench/coordinator -nodes 5000 -grants 200
package main

import (
	"context"
	"encoding/json"
	"flag"
	"fmt"
	"io"
	"log"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"sort"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"time"

	coordinationv1 "k8s.io/api/coordination/v1"
	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/apimachinery/pkg/util/intstr"
	"k8s.io/apimachinery/pkg/watch"
	"k8s.io/client-go/dynamic"
	"k8s.io/client-go/kubernetes"
	"k8s.io/utils/ptr"

	"github.com/nodeward/nodeward/api/v1alpha1"
	"github.com/nodeward/nodeward/daemon/update"
	"github.com/nodeward/nodeward/test/cluster"
	"github.com/nodeward/nodeward/test/prom"
)

func main() {
	nodes := flag.Int("nodes", 5000, "Node objects in the cluster (all in the pool)")
	grants := flag.Int("grants", 200, "slot-free → grant cycles to measure")
	settle := flag.Duration("settle", 45*time.Second, "wait this long after creating the nodes before the coordinator starts")
	renewal := flag.Duration("lease-renewal", 80*time.Second, "renew every node's agent Lease once in this period, spread evenly, as the agents do (0: never)")
	gates := flag.Bool("gates", false, "after the grants, give the pool health gates on a real Prometheus (an alert selector and two queries) and measure as many grants again")
	flag.Parse()
	if err := run(*nodes, *grants, *settle, *renewal, *gates); err != nil {
		log.Fatal(err)
	}
}

func run(nodeCount, grantCount int, settle, renewal time.Duration, gates bool) error {
	binDir := os.Getenv(cluster.BinDirVariable)
	if binDir == "" {
		return fmt.Errorf("%s is not set (make testbin)", cluster.BinDirVariable)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Minute)
	defer cancel()
	cp, err := cluster.Start(ctx, cluster.Options{BinDir: binDir,
		Controllers: "*,-serviceaccount-token-controller,-node-lifecycle-controller"})
	if err != nil {
		return err
	}
	defer func() { cp.Stop(); os.RemoveAll(cp.Dir()) }()
	cfg := cp.Config()
	cfg.QPS, cfg.Burst = 5000, 5000
	client := kubernetes.NewForConfigOrDie(cfg)
	dyn := dynamic.NewForConfigOrDie(cfg)
	if err := cp.InstallCRDs(ctx); err != nil {
		return err
	}
	stopRenewing, err := populate(ctx, client, nodeCount, settle, renewal)
	if err != nil {
		return err
	}
	defer stopRenewing() // before the control plane stops (deferred earlier)

	bin, err := cluster.NodewardBinary(cluster.ReleaseBuild)
	if err != nil {
		return err
	}
	defer cluster.RemoveBuilds()
	metricsAddr, err := cluster.FreeAddr()
	if err != nil {
		return err
	}
	// The watch and the pool come first, so the coordinator's start-up is
	// measured to the first grant from the moment its process starts.
	w, err := client.CoreV1().Nodes().Watch(ctx, metav1.ListOptions{LabelSelector: cluster.GroupLabel + "=bench"})
	if err != nil {
		return err
	}
	defer w.Stop()
	if err := createBenchPool(ctx, dyn); err != nil {
		return err
	}
	coord, err := startCoordinator(bin, cp, metricsAddr)
	if err != nil {
		return err
	}
	startedAt := time.Now()
	defer func() { _ = coord.Process.Signal(syscall.SIGTERM); _ = coord.Wait() }()

	phases, stopGates, err := benchPhases(gates, grantCount, cp.Dir())
	if err != nil {
		return err
	}
	defer stopGates()
	m := meter{client: client, metricsAddr: metricsAddr, pid: coord.Process.Pid}
	results, startup, err := measure(ctx, w, client, dyn, m, phases, startedAt)
	if err != nil {
		return err
	}
	rss, hwm := procMemory(coord.Process.Pid)
	for i, r := range results {
		printPhaseResult(phases[i].name, nodeCount, r)
	}
	fmt.Printf("coordinator-startup=%s (process start to the first grant)\n", startup.Round(time.Millisecond))
	fmt.Printf("coordinator-rss=%.1fMiB peak-rss=%.1fMiB\n", rss, hwm)
	return nil
}

// populate creates the nodes and their agent Leases, renews the Leases
// every renewal (when not 0) until the returned function is called, and
// waits settle.
func populate(ctx context.Context, client kubernetes.Interface, nodeCount int, settle, renewal time.Duration) (stopRenewing func(), err error) {
	start := time.Now()
	names, err := createNodes(ctx, client, nodeCount)
	if err != nil {
		return nil, err
	}
	log.Printf("created %d nodes and their agent Leases in %s", nodeCount, time.Since(start).Round(time.Millisecond))
	stopRenewing = func() {}
	if renewal > 0 {
		var renewCtx context.Context
		renewCtx, stopRenewing = context.WithCancel(ctx)
		go renewLeases(renewCtx, client, names, renewal)
	}
	// The API server and etcd digest the burst of creations for a while;
	// -settle keeps that out of the measured grants.
	time.Sleep(settle)
	return stopRenewing, nil
}

// createBenchPool creates the pool of every benchmark node, moving them to
// benchTarget one at a time.
func createBenchPool(ctx context.Context, dyn dynamic.Interface) error {
	pool := &v1alpha1.UpdatePool{ObjectMeta: metav1.ObjectMeta{Name: "bench"}, Spec: v1alpha1.UpdatePoolSpec{
		NodeSelector: &metav1.LabelSelector{MatchLabels: map[string]string{cluster.GroupLabel: "bench"}},
		OSImage:      benchTarget, MaxUnavailable: ptr.To(intstr.FromInt32(1)),
	}}
	return cluster.CreatePool(ctx, dyn, pool)
}

// startCoordinator starts the coordinator under test, without leader
// election, logging into the control plane's directory and serving its
// metrics on metricsAddr.
func startCoordinator(bin string, cp *cluster.ControlPlane, metricsAddr string) (*exec.Cmd, error) {
	coord := exec.Command(bin, "coordinator", "--kubeconfig="+cp.KubeconfigPath(), "--leader-elect=false",
		"--metrics-address="+metricsAddr, "--resync=30s")
	logFile, _ := os.Create(filepath.Join(cp.Dir(), "coordinator.log"))
	coord.Stdout, coord.Stderr = logFile, logFile
	coord.SysProcAttr = &syscall.SysProcAttr{Pdeathsig: syscall.SIGKILL}
	if err := coord.Start(); err != nil {
		return nil, err
	}
	return coord, nil
}

// benchPhases are the measured phases: one plain, or with gates one
// without and one with health gates on a Prometheus that the returned
// function stops.
func benchPhases(gates bool, grantCount int, dir string) ([]phase, func(), error) {
	if !gates {
		return []phase{{name: "plain", grants: grantCount}}, func() {}, nil
	}
	spec, stop, err := gateSpec(dir)
	if err != nil {
		return nil, nil, err
	}
	return []phase{{name: "without gates", grants: grantCount}, {name: "with gates", grants: grantCount, spec: spec}}, stop, nil
}

// printPhaseResult prints one phase's figures: grant latencies against
// the simulated agents' one-node writes, API requests and CPU per grant.
func printPhaseResult(name string, nodeCount int, r phaseResult) {
	latencies := r.latencies
	sort.Slice(latencies, func(i, j int) bool { return latencies[i] < latencies[j] })
	pct := func(p float64) time.Duration { return latencies[int(p*float64(len(latencies)-1))] }
	n := float64(len(latencies))
	writes := r.writes
	sort.Slice(writes, func(i, j int) bool { return writes[i] < writes[j] })
	wpct := func(p float64) time.Duration { return writes[int(p*float64(len(writes)-1))] }
	fmt.Printf("phase=%q nodes=%d grants=%d grant-latency p50=%s p99=%s max=%s api-requests-per-grant=%.2f (%s) apiserver-requests-per-second=%.1f (%.1f per grant, every client)\n",
		name, nodeCount, len(latencies), pct(0.5).Round(time.Microsecond), pct(0.99).Round(time.Microsecond),
		latencies[len(latencies)-1].Round(time.Microsecond), r.requests.total()/n, r.requests.perGrant(n),
		r.apiserver/r.elapsed.Seconds(), r.apiserver/n)
	fmt.Printf("phase=%q one-node-write p50=%s p99=%s (the simulated agents' Done writes) grant-p50/write-p50=%.2f grant-p99/write-p99=%.2f coordinator-cpu=%.1f%% of one core\n",
		name, wpct(0.5).Round(time.Microsecond), wpct(0.99).Round(time.Microsecond),
		float64(pct(0.5))/float64(wpct(0.5)), float64(pct(0.99))/float64(wpct(0.99)), 100*r.cpu/r.elapsed.Seconds())
	if r.passes > 0 {
		fmt.Printf("phase=%q plan-passes-per-grant=%.2f mean-plan-pass=%s\n", name, r.passes/n,
			time.Duration(r.planSecs/r.passes*float64(time.Second)).Round(time.Microsecond))
	}
}

// gateSpec starts a real Prometheus and returns gates on it: every firing
// alert (there are none), and two queries that pass.
func gateSpec(dir string) (map[string]any, func(), error) {
	binary, err := exec.LookPath("prometheus")
	if err != nil {
		return nil, nil, fmt.Errorf("-gates needs prometheus (Debian package prometheus): %w", err)
	}
	promDir := filepath.Join(dir, "prometheus")
	if err := os.MkdirAll(promDir, 0o755); err != nil {
		return nil, nil, err
	}
	p, stop, err := prom.Run(binary, promDir, prom.PrometheusOptions{})
	if err != nil {
		return nil, nil, err
	}
	return map[string]any{"gates": map[string]any{"prometheus": p.URL, "alerts": map[string]any{}, "queries": []any{
		map[string]any{"name": "no-unavailable", "query": "vector(0)", "max": "0"},
		map[string]any{"name": "availability", "query": "scalar(vector(1))", "min": "0.999"},
	}}}, stop, nil
}

// benchTarget is the pool's OS image in the benchmark.
const benchTarget = "quay.io/fedora/fedora-coreos:bench"

func createNodes(ctx context.Context, client kubernetes.Interface, n int) ([]string, error) {
	names := make([]string, n)
	errs := make(chan error, n)
	work := make(chan int)
	var wg sync.WaitGroup
	capacity := corev1.ResourceList{corev1.ResourceCPU: resource.MustParse("32"), corev1.ResourcePods: resource.MustParse("110")}
	for range 32 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for i := range work {
				name := fmt.Sprintf("bench-%04d", i)
				names[i] = name
				node := &corev1.Node{
					ObjectMeta: metav1.ObjectMeta{Name: name, Labels: map[string]string{
						cluster.GroupLabel: "bench", cluster.ZoneLabel: fmt.Sprintf("zone-%d", i%10)},
						// Pre-staged, as agents report before any grant: only
						// staged nodes are granted.
						Annotations: map[string]string{v1alpha1.AnnotationTarget: benchTarget, v1alpha1.AnnotationStaged: benchTarget}},
					Status: corev1.NodeStatus{Capacity: capacity, Allocatable: capacity, Conditions: []corev1.NodeCondition{{
						Type: corev1.NodeReady, Status: corev1.ConditionTrue, Reason: "Bench",
						LastHeartbeatTime: metav1.Now(), LastTransitionTime: metav1.Now()}}},
				}
				if _, err := client.CoreV1().Nodes().Create(ctx, node, metav1.CreateOptions{}); err != nil {
					errs <- fmt.Errorf("create node %s: %w", name, err)
					continue
				}
				_, err := client.CoordinationV1().Leases(v1alpha1.AgentLeaseNamespace).Create(ctx, &coordinationv1.Lease{
					ObjectMeta: metav1.ObjectMeta{Name: v1alpha1.AgentLeaseName(name)},
					Spec: coordinationv1.LeaseSpec{HolderIdentity: ptr.To(name), LeaseDurationSeconds: ptr.To[int32](3600),
						RenewTime: &metav1.MicroTime{Time: time.Now()}},
				}, metav1.CreateOptions{})
				if err != nil {
					errs <- fmt.Errorf("create Lease of %s: %w", name, err)
				}
			}
		}()
	}
	for i := range n {
		work <- i
	}
	close(work)
	wg.Wait()
	close(errs)
	for err := range errs {
		return nil, err
	}
	return names, nil
}

// renewLeases plays the agents' liveness: every node's Lease is renewed
// once per period, the renewals spread evenly (10,000 nodes at 80 s: 125 a
// second), until ctx ends.
func renewLeases(ctx context.Context, client kubernetes.Interface, names []string, period time.Duration) {
	leases := client.CoordinationV1().Leases(v1alpha1.AgentLeaseNamespace)
	tick := time.NewTicker(period / time.Duration(len(names)))
	defer tick.Stop()
	for i := 0; ; i = (i + 1) % len(names) {
		select {
		case <-ctx.Done():
			return
		case <-tick.C:
		}
		patch := fmt.Sprintf(`{"spec":{"renewTime":%q}}`, time.Now().UTC().Format("2006-01-02T15:04:05.000000Z07:00"))
		if _, err := leases.Patch(ctx, v1alpha1.AgentLeaseName(names[i]), types.MergePatchType, []byte(patch), metav1.PatchOptions{}); err != nil && ctx.Err() == nil {
			log.Printf("renew the Lease of %s: %v", names[i], err)
		}
	}
}

// phase is one run of grants under one pool spec: spec, when set, is
// merged into the pool's spec before the phase starts.
type phase struct {
	name   string
	grants int
	spec   map[string]any
}

// phaseResult is a phase's grant latencies, the coordinator's API
// requests during it by method, and the API server's requests from every
// client over its elapsed time.
type phaseResult struct {
	latencies []time.Duration
	writes    []time.Duration // the simulated agents' Done writes, sent to answered
	cpu       float64         // the coordinator's CPU seconds
	passes    float64         // its plan passes
	planSecs  float64         // their time
	requests  requestCounts
	apiserver float64
	elapsed   time.Duration
}

// requestCounts is the coordinator's requests by HTTP method.
type requestCounts map[string]float64

func (r requestCounts) total() float64 {
	t := 0.0
	for _, v := range r {
		t += v
	}
	return t
}

func (r requestCounts) minus(before requestCounts) requestCounts {
	d := requestCounts{}
	for k, v := range r {
		d[k] = v - before[k]
	}
	return d
}

// perGrant lists each method's requests per grant, largest first.
func (r requestCounts) perGrant(grants float64) string {
	methods := make([]string, 0, len(r))
	for m := range r {
		methods = append(methods, m)
	}
	sort.Slice(methods, func(i, j int) bool { return r[methods[i]] > r[methods[j]] })
	parts := make([]string, 0, len(methods))
	for _, m := range methods {
		if r[m] > 0 {
			parts = append(parts, fmt.Sprintf("%s %.2f", m, r[m]/grants))
		}
	}
	return strings.Join(parts, ", ")
}

// meter reads the two request counters a phase is measured by.
type meter struct {
	client      kubernetes.Interface
	metricsAddr string
	pid         int // the coordinator's
}

// sample is both counters at one moment.
type sample struct {
	at          time.Time
	coordinator requestCounts
	apiserver   float64
	cpu         float64 // the coordinator process's CPU seconds
	passes      float64 // the coordinator's plan passes (nodeward_pool_plan_seconds)
	planSeconds float64 // and their time
}

func (m meter) read(ctx context.Context) sample {
	s := sample{at: time.Now(), apiserver: scrapeAPIServer(ctx, m.client), cpu: cpuSeconds(m.pid)}
	s.coordinator, s.passes, s.planSeconds = scrapeRequests(m.metricsAddr)
	return s
}

func (m meter) since(ctx context.Context, start sample, r *phaseResult) {
	end := m.read(ctx)
	r.requests = end.coordinator.minus(start.coordinator)
	r.apiserver = end.apiserver - start.apiserver
	r.elapsed = end.at.Sub(start.at)
	r.cpu = end.cpu - start.cpu
	r.passes = end.passes - start.passes
	r.planSecs = end.planSeconds - start.planSeconds
}

// cpuSeconds is a process's user and system CPU time.
func cpuSeconds(pid int) float64 {
	data, err := os.ReadFile(fmt.Sprintf("/proc/%d/stat", pid))
	if err != nil {
		return 0
	}
	// Fields after the command name: utime is the 14th overall, stime the 15th.
	f := strings.Fields(string(data[strings.LastIndexByte(string(data), ')')+2:]))
	u, _ := strconv.ParseFloat(f[11], 64)
	st, _ := strconv.ParseFloat(f[12], 64)
	return (u + st) / 100 // USER_HZ
}

// measure plays the agents: each grant is answered at once with Done; the
// latency of a cycle runs from the Done write's return to the next grant's
// arrival in the watch. Phases follow each other on the same pool. The
// first grant also gives the coordinator's start-up.
func measure(ctx context.Context, w watch.Interface, client kubernetes.Interface, dyn dynamic.Interface, m meter, phases []phase, startedAt time.Time) ([]phaseResult, time.Duration, error) {
	var (
		results = make([]phaseResult, len(phases))
		current = 0
		freedAt time.Time
		seen    = map[string]bool{}
		start   sample
		startup time.Duration
	)
	deadline := time.After(15 * time.Minute)
	for current < len(phases) {
		select {
		case <-deadline:
			return nil, 0, fmt.Errorf("phase %q: only %d of %d grants within 15 minutes", phases[current].name, len(results[current].latencies), phases[current].grants)
		case ev, ok := <-w.ResultChan():
			if !ok {
				return nil, 0, fmt.Errorf("node watch closed")
			}
			node, isNode := ev.Object.(*corev1.Node)
			if !isNode {
				continue
			}
			grant := node.Annotations[v1alpha1.AnnotationGrant]
			if grant == "" || seen[grant] {
				continue
			}
			seen[grant] = true
			arrived := time.Now()
			if startup == 0 {
				startup = arrived.Sub(startedAt)
			}
			if freedAt.IsZero() {
				// The first grant of a phase starts its window: every
				// request after it belongs to a measured cycle.
				start = m.read(ctx)
			} else {
				r := &results[current]
				r.latencies = append(r.latencies, arrived.Sub(freedAt))
				if len(r.latencies) == phases[current].grants {
					m.since(ctx, start, r)
					current++
					freedAt = time.Time{}
					if current == len(phases) {
						break
					}
					if err := switchPhase(ctx, dyn, phases[current]); err != nil {
						return nil, 0, err
					}
					start = m.read(ctx)
				}
			}
			// The agent's own report of Done (with the release of a grant
			// marked release-at-done), as AnnotationProtocol sends it.
			done := update.ReportAnnotations(update.State{Step: v1alpha1.StepDone, Target: node.Annotations[v1alpha1.AnnotationTarget],
				Grant: grant, ReleaseAtDone: node.Annotations[v1alpha1.AnnotationReleaseAtDone] == "true"})
			patch, _ := json.Marshal(map[string]any{"metadata": map[string]any{"annotations": done}})
			sent := time.Now()
			if _, err := client.CoreV1().Nodes().Patch(ctx, node.Name, types.MergePatchType, patch, metav1.PatchOptions{}); err != nil {
				return nil, 0, err
			}
			freedAt = time.Now()
			if current < len(results) {
				// The same API server's answer to one Node write, in the
				// same moments: the floor a grant (one more write, after a
				// read) cannot go under.
				results[current].writes = append(results[current].writes, freedAt.Sub(sent))
			}
		}
	}
	return results, startup, nil
}

// switchPhase merges the next phase's spec into the pool and waits until
// the coordinator has planned it (status.observedGeneration) before the
// next slot frees.
func switchPhase(ctx context.Context, dyn dynamic.Interface, next phase) error {
	if next.spec == nil {
		return nil
	}
	patch, _ := json.Marshal(map[string]any{"spec": next.spec})
	pools := dyn.Resource(v1alpha1.UpdatePoolResource())
	obj, err := pools.Patch(ctx, "bench", types.MergePatchType, patch, metav1.PatchOptions{})
	if err != nil {
		return fmt.Errorf("patch the pool for phase %q: %w", next.name, err)
	}
	want := obj.GetGeneration()
	return cluster.Poll(ctx, "the coordinator plans the pool of phase "+next.name, 50*time.Millisecond, nil,
		func(ctx context.Context) (bool, error) {
			cur, err := pools.Get(ctx, "bench", metav1.GetOptions{})
			if err != nil {
				return false, err
			}
			got, _, _ := unstructured.NestedInt64(cur.Object, "status", "observedGeneration")
			return got == want, nil
		})
}

// scrapeRequests reads nodeward_api_requests_total{component="coordinator"}
// by method.
func scrapeRequests(addr string) (counts requestCounts, passes, planSeconds float64) {
	counts = requestCounts{}
	resp, err := http.Get("http://" + addr + "/metrics")
	if err != nil {
		return counts, 0, 0
	}
	defer resp.Body.Close()
	body, _ := io.ReadAll(resp.Body)
	for _, line := range strings.Split(string(body), "\n") {
		if f := strings.Fields(line); len(f) == 2 && strings.HasPrefix(line, "nodeward_pool_plan_seconds_") {
			v, _ := strconv.ParseFloat(f[1], 64)
			switch {
			case strings.HasPrefix(line, "nodeward_pool_plan_seconds_count{"):
				passes += v
			case strings.HasPrefix(line, "nodeward_pool_plan_seconds_sum{"):
				planSeconds += v
			}
		}
		if !strings.HasPrefix(line, "nodeward_api_requests_total{") {
			continue
		}
		method := ""
		if i := strings.Index(line, `method="`); i >= 0 {
			method = line[i+len(`method="`):]
			method = method[:strings.IndexByte(method, '"')]
		}
		f := strings.Fields(line)
		v, _ := strconv.ParseFloat(f[len(f)-1], 64)
		counts[strings.ToUpper(method)] += v
	}
	return counts, passes, planSeconds
}

// scrapeAPIServer sums the API server's apiserver_request_total: every
// request it answered, from every client.
func scrapeAPIServer(ctx context.Context, client kubernetes.Interface) float64 {
	body, err := client.CoreV1().RESTClient().Get().AbsPath("/metrics").DoRaw(ctx)
	if err != nil {
		return 0
	}
	total := 0.0
	for _, line := range strings.Split(string(body), "\n") {
		if strings.HasPrefix(line, "apiserver_request_total{") {
			f := strings.Fields(line)
			v, _ := strconv.ParseFloat(f[len(f)-1], 64)
			total += v
		}
	}
	return total
}

func procMemory(pid int) (rssMiB, peakMiB float64) {
	data, err := os.ReadFile(fmt.Sprintf("/proc/%d/status", pid))
	if err != nil {
		return 0, 0
	}
	for _, line := range strings.Split(string(data), "\n") {
		f := strings.Fields(line)
		if len(f) >= 2 && (f[0] == "VmRSS:" || f[0] == "VmHWM:") {
			kb, _ := strconv.ParseFloat(f[1], 64)
			if f[0] == "VmRSS:" {
				rssMiB = kb / 1024
			} else {
				peakMiB = kb / 1024
			}
		}
	}
	return rssMiB, peakMiB
}
