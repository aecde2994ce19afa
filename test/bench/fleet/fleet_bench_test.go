// Package fleet benchmarks a fleet the way a user runs it: 100 real
// `nodeward agent` processes on simulated hosts (the rpm-ostree double, a
// fake logind, a simulated reboot) under a real `nodeward coordinator`
// process with leader election, on the real control plane with kwok nodes
// running pods under a PodDisruptionBudget.
//
//	NODEWARD_TESTBIN_DIR=... go test ./test/bench/fleet -run '^$' -bench . -benchtime 1x -timeout 30m
package fleet

import (
	"context"
	"fmt"
	"io"
	"maps"
	"math"
	"net/http"
	"os"
	"slices"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/intstr"
	"k8s.io/client-go/dynamic"
	"k8s.io/client-go/informers"
	"k8s.io/client-go/tools/cache"
	"k8s.io/utils/ptr"

	"github.com/nodeward/nodeward/api/v1alpha1"
	"github.com/nodeward/nodeward/footprint"
	"github.com/nodeward/nodeward/test/cluster"
	"github.com/nodeward/nodeward/test/oracle"
	"github.com/nodeward/nodeward/test/sim"
	"github.com/nodeward/nodeward/test/testenv"
)

var env cluster.Env

func TestMain(m *testing.M) { os.Exit(env.Run(m)) }

const (
	nodes          = 100
	maxUnavailable = 10
	// idleWindow spans two of the agents' Lease renewals (every 80 s):
	// agents started together renew together, and a shorter window can
	// hold none of them.
	idleWindow = 160 * time.Second
)

// BenchmarkRollout100Processes reports the makespan against the ideal
// ceil(N/M) × the median per-node time (grant seen → Done seen) of the
// same run, the fleet's RSS, and the API server's request rate with the
// fleet idle and during the rollout, net of the control plane's own.
func BenchmarkRollout100Processes(b *testing.B) {
	testenv.RequireBinary(b, "dbus-daemon")
	cp := env.ControlPlane(b)
	bin, err := sim.BuildProcBinaries(b.TempDir())
	if err != nil {
		b.Fatal(err)
	}
	dyn, err := dynamic.NewForConfig(cp.Config())
	if err != nil {
		b.Fatal(err)
	}
	ctx := context.Background()
	if err := cp.InstallCRDs(ctx); err != nil {
		b.Fatal(err)
	}
	names := cp.CreateNodes(b, cluster.NodeSpec{Prefix: "fleet", Count: nodes})
	ns := workload(b, cp, names)

	procs := map[string]*sim.ProcNode{}
	ports, err := cluster.FreePorts(nodes)
	if err != nil {
		b.Fatal(err)
	}
	var scrapes []string
	for i, name := range names {
		n, err := sim.NewProcNode(bin, name, cp.KubeconfigPath(), b.TempDir(), sim.ProcBooted(), sim.ProcImages())
		if err != nil {
			b.Fatal(err)
		}
		n.RebootDelay = time.Second
		// Each agent's own request counter, so that the control plane's
		// traffic (kwok, the controllers, the scheduler) is not counted.
		addr := fmt.Sprintf("127.0.0.1:%d", ports[i])
		n.Args = []string{"--metrics-address", addr, "--metrics-auth", "none"}
		scrapes = append(scrapes, "http://"+addr+"/metrics")
		procs[name] = n
	}
	sim.RunMachines(b, procs)
	for _, n := range procs {
		if err := n.Start(); err != nil {
			b.Fatal(err)
		}
	}
	cluster.WaitFor(b, 3*time.Minute, "every agent's Lease", func(ctx context.Context) (bool, error) {
		list, err := cp.Client().CoordinationV1().Leases(v1alpha1.AgentLeaseNamespace).List(ctx, metav1.ListOptions{})
		return err == nil && len(list.Items) >= nodes, err
	})
	idleStart := agentRequests(scrapes)
	deadline := time.Now().Add(idleWindow)
	cluster.WaitFor(b, idleWindow+time.Minute, "the idle window", func(context.Context) (bool, error) {
		return !time.Now().Before(deadline), nil
	})
	idleEnd := agentRequests(scrapes)
	idleRSS := fleetRSS(procs) // at the end of the idle window: each agent started and settled
	idle := rate{all: (idleEnd.all - idleStart.all) / idleWindow.Minutes(), writes: (idleEnd.writes - idleStart.writes) / idleWindow.Minutes()}
	apiBefore := scrapeRequests(b, cp)

	leaderNS := cp.Namespace(b)
	coord := bin.Coordinator(cp.KubeconfigPath(), "--leader-election-namespace", leaderNS)
	coord.Stdout, coord.Stderr = nil, nil
	if err := coord.Start(); err != nil {
		b.Fatal(err)
	}
	b.Cleanup(func() { _ = coord.Process.Kill(); _ = coord.Wait() })

	w := watchFleet(b, cp)
	pods := watchWorkload(b, cp, ns)
	b.ResetTimer()
	sampler := sampleAgents(scrapes)
	pool := &v1alpha1.UpdatePool{ObjectMeta: metav1.ObjectMeta{Name: "fleet"}, Spec: v1alpha1.UpdatePoolSpec{
		NodeSelector: &metav1.LabelSelector{MatchLabels: map[string]string{cluster.GroupLabel: "fleet"}},
		OSImage:      sim.ProcTarget, MaxUnavailable: ptr.To(intstr.FromInt32(maxUnavailable)),
	}}
	if err := cluster.CreatePool(ctx, dyn, pool); err != nil {
		b.Fatal(err)
	}
	cluster.WaitFor(b, 20*time.Minute, "every node Done", func(context.Context) (bool, error) {
		return w.done() == nodes, nil
	})
	b.StopTimer()
	during := sampler.stop()
	apiAfter := scrapeRequests(b, cp)

	makespan, perNode, peak := w.result()
	b.Logf("where each node's time went (grant to Done):\n%s", w.stepTimes())
	first := w.firstGrant()
	budget := pods.result(first, first.Add(makespan))
	b.Logf("the workload's budget: %s", budget)
	b.Logf("each node's time by the pods evicted from it:\n%s", w.byPods(pods.evictedFrom(first, first.Add(makespan))))
	median := perNode[len(perNode)/2]
	ideal := time.Duration(math.Ceil(float64(nodes)/maxUnavailable)) * median
	minutes := makespan.Minutes()
	b.ReportMetric(makespan.Seconds(), "s-makespan")
	b.ReportMetric(median.Seconds(), "s-median-node")
	b.ReportMetric(ideal.Seconds(), "s-ideal")
	b.ReportMetric(makespan.Seconds()/ideal.Seconds(), "makespan/ideal")
	b.ReportMetric(float64(budget.evictions), "evictions")
	b.ReportMetric(budget.bound.Seconds(), "s-pdb-bound")
	b.ReportMetric(makespan.Seconds()/budget.bound.Seconds(), "makespan/pdb-bound")
	b.ReportMetric(budget.readyP50.Seconds(), "s-replacement-ready-p50")
	b.ReportMetric(budget.exhausted.Seconds()/makespan.Seconds(), "pdb-exhausted-share")
	b.ReportMetric(float64(peak), "max-unavailable-seen")
	b.ReportMetric(perNode[len(perNode)*9/10].Seconds(), "s-p90-node")
	b.ReportMetric(perNode[len(perNode)-1].Seconds(), "s-max-node")
	if gaps := w.gaps(); len(gaps) > 0 {
		b.ReportMetric(gaps[len(gaps)/2].Seconds()*1000, "ms-handoff-p50")
		b.ReportMetric(gaps[len(gaps)*99/100].Seconds()*1000, "ms-handoff-p99")
	}
	b.ReportMetric(idleRSS, "MiB-fleet-rss-idle")
	b.ReportMetric(idle.writes/nodes, "writes/node/min-idle")
	b.ReportMetric(idle.all/nodes, "requests/node/min-idle")
	b.ReportMetric(during.writes/minutes/nodes, "writes/node/min-rollout")
	b.ReportMetric(during.all/minutes/nodes, "requests/node/min-rollout")
	// The API server's own count over the rollout and the idle window
	// before it: every client, the control plane's included.
	b.ReportMetric((apiAfter.all-apiBefore.all)/(minutes+idleWindow.Minutes()), "apiserver-requests/min")
	b.ReportMetric(0, "ns/op")
	if peak > maxUnavailable {
		b.Errorf("the watcher saw %d nodes unavailable at once, maxUnavailable %d", peak, maxUnavailable)
	}
}

// fleetWatch follows every node with an informer: when each was first
// seen granted and Done, and the most nodes unavailable at once as an
// observer counts them (oracle.CordonOrStep).
type fleetWatch struct {
	mu              sync.Mutex
	granted, doneAt map[string]time.Time
	first           time.Time
	peak            int
	store           cache.Store
	// freed are the Done times not yet followed by a grant; handoffs are
	// the gaps from a Done to the grant that used its slot.
	freed    []time.Time
	handoffs []time.Duration
	// steps are each node's update states in the order first seen.
	steps map[string][]stepSeen
}

// stepSeen is a node's state annotation and when the watch first saw it.
type stepSeen struct {
	step string
	at   time.Time
}

func watchFleet(b *testing.B, cp *cluster.ControlPlane) *fleetWatch {
	w := &fleetWatch{granted: map[string]time.Time{}, doneAt: map[string]time.Time{}, steps: map[string][]stepSeen{}}
	factory := informers.NewSharedInformerFactoryWithOptions(cp.Client(), 0,
		informers.WithTweakListOptions(func(o *metav1.ListOptions) { o.LabelSelector = cluster.GroupLabel + "=fleet" }))
	inf := factory.Core().V1().Nodes().Informer()
	w.store = inf.GetStore()
	on := func(obj any) {
		n, ok := obj.(*corev1.Node)
		if !ok {
			return
		}
		now := time.Now()
		w.mu.Lock()
		defer w.mu.Unlock()
		if n.Annotations[v1alpha1.AnnotationGrant] != "" && w.granted[n.Name].IsZero() {
			w.granted[n.Name] = now
			if w.first.IsZero() {
				w.first = now
			}
			if len(w.freed) > 0 {
				// The slot this grant fills freed at the oldest Done not
				// yet followed by a grant.
				w.handoffs = append(w.handoffs, now.Sub(w.freed[0]))
				w.freed = w.freed[1:]
			}
		}
		if st := n.Annotations[v1alpha1.AnnotationState]; st != "" {
			if seen := w.steps[n.Name]; len(seen) == 0 || seen[len(seen)-1].step != st {
				w.steps[n.Name] = append(seen, stepSeen{st, now})
			}
		}
		if n.Annotations[v1alpha1.AnnotationState] == string(v1alpha1.StepDone) && n.Annotations[v1alpha1.AnnotationStateTarget] == sim.ProcTarget && w.doneAt[n.Name].IsZero() {
			w.doneAt[n.Name] = now
			w.freed = append(w.freed, now)
		}
		down := 0
		for _, o := range w.store.List() {
			if oracle.CordonOrStep.Counts(o.(*corev1.Node)) {
				down++
			}
		}
		w.peak = max(w.peak, down)
	}
	_, _ = inf.AddEventHandler(cache.ResourceEventHandlerFuncs{AddFunc: on, UpdateFunc: func(_, o any) { on(o) }})
	stop := make(chan struct{})
	factory.Start(stop)
	factory.WaitForCacheSync(stop)
	b.Cleanup(func() { close(stop); factory.Shutdown() })
	return w
}

func (w *fleetWatch) done() int {
	w.mu.Lock()
	defer w.mu.Unlock()
	return len(w.doneAt)
}

// firstGrant is when the rollout's first grant was seen.
func (w *fleetWatch) firstGrant() time.Time {
	w.mu.Lock()
	defer w.mu.Unlock()
	return w.first
}

// gaps are the handoffs from a Done to the next grant, sorted.
func (w *fleetWatch) gaps() []time.Duration {
	w.mu.Lock()
	defer w.mu.Unlock()
	out := slices.Clone(w.handoffs)
	slices.Sort(out)
	return out
}

// result is the makespan (first grant → last Done), each node's time
// from its grant to its Done, sorted, and the peak unavailable count.
func (w *fleetWatch) result() (time.Duration, []time.Duration, int) {
	w.mu.Lock()
	defer w.mu.Unlock()
	var last time.Time
	var per []time.Duration
	for n, d := range w.doneAt {
		if d.After(last) {
			last = d
		}
		if g := w.granted[n]; !g.IsZero() {
			per = append(per, d.Sub(g))
		}
	}
	slices.Sort(per)
	return last.Sub(w.first), per, w.peak
}

// stepTimes is where each node's time from its grant to its Done went, as
// the watch saw it: for each state the agent reported after its grant, the
// time until its next state, over the fleet (median, p90, max), in the
// order the states come. "granted" is the grant until the first state
// after it.
func (w *fleetWatch) stepTimes() string {
	w.mu.Lock()
	defer w.mu.Unlock()
	per := map[string][]time.Duration{}
	var order []string
	add := func(step string, d time.Duration) {
		if _, ok := per[step]; !ok {
			order = append(order, step)
		}
		per[step] = append(per[step], d)
	}
	for node, g := range w.granted {
		last := stepSeen{"granted", g}
		for _, s := range w.steps[node] {
			if s.at.Before(g) {
				continue
			}
			add(last.step, s.at.Sub(last.at))
			last = s
			if s.step == string(v1alpha1.StepDone) {
				break
			}
		}
	}
	var out strings.Builder
	fmt.Fprintf(&out, "%-16s %5s %9s %9s %9s\n", "state", "nodes", "median", "p90", "max")
	for _, step := range order {
		d := per[step]
		slices.Sort(d)
		fmt.Fprintf(&out, "%-16s %5d %9s %9s %9s\n", step, len(d), d[len(d)/2].Round(time.Millisecond),
			d[len(d)*9/10].Round(time.Millisecond), d[len(d)-1].Round(time.Millisecond))
	}
	return out.String()
}

// byPods is each node's time from its grant to its Done, grouped by the
// number of the workload's pods evicted from it: the nodes that received a
// replacement before their own drain have more to evict.
func (w *fleetWatch) byPods(evicted map[string]int) string {
	w.mu.Lock()
	defer w.mu.Unlock()
	groups := map[int][]time.Duration{}
	for n, d := range w.doneAt {
		if g := w.granted[n]; !g.IsZero() {
			groups[evicted[n]] = append(groups[evicted[n]], d.Sub(g))
		}
	}
	var out strings.Builder
	fmt.Fprintf(&out, "%-6s %5s %9s %9s %9s\n", "pods", "nodes", "median", "mean", "max")
	for _, k := range slices.Sorted(maps.Keys(groups)) {
		d := groups[k]
		slices.Sort(d)
		var sum time.Duration
		for _, x := range d {
			sum += x
		}
		fmt.Fprintf(&out, "%-6d %5d %9s %9s %9s\n", k, len(d), d[len(d)/2].Round(time.Millisecond),
			(sum / time.Duration(len(d))).Round(time.Millisecond), d[len(d)-1].Round(time.Millisecond))
	}
	return out.String()
}

// rate is a count of requests, or a rate per minute: all, and writes.
type rate struct{ all, writes float64 }

// sampler follows the agents' request counters through a rollout, in
// which every agent process restarts once (its reboot) and its counter
// with it: each agent's count is summed over its processes. What a
// process did after its last sample (at most a second) is not counted.
type sampler struct {
	done  chan struct{}
	total chan rate
}

func sampleAgents(urls []string) *sampler {
	s := &sampler{done: make(chan struct{}), total: make(chan rate, 1)}
	go func() {
		last := make([]rate, len(urls))
		var gone rate // the counts of processes that ended
		first := make([]rate, len(urls))
		for i, u := range urls {
			first[i] = agentRequests([]string{u})
			last[i] = first[i]
		}
		tick := time.NewTicker(time.Second)
		defer tick.Stop()
		for {
			select {
			case <-s.done:
				var sum rate
				for i := range urls {
					sum.all += last[i].all - first[i].all
					sum.writes += last[i].writes - first[i].writes
				}
				s.total <- rate{all: sum.all + gone.all, writes: sum.writes + gone.writes}
				return
			case <-tick.C:
			}
			for i, u := range urls {
				cur := agentRequests([]string{u})
				if cur.all == 0 {
					continue // rebooting
				}
				if cur.all < last[i].all { // a new process
					gone.all += last[i].all - first[i].all
					gone.writes += last[i].writes - first[i].writes
					first[i] = rate{}
				}
				last[i] = cur
			}
		}
	}()
	return s
}

// stop ends the sampling and returns the requests counted.
func (s *sampler) stop() rate {
	close(s.done)
	return <-s.total
}

// agentRequests sums every agent's nodeward_api_requests_total: all
// requests, and the writes.
func agentRequests(urls []string) rate {
	var r rate
	for _, u := range urls {
		resp, err := http.Get(u)
		if err != nil {
			continue // an agent rebooting: its counter starts again anyway
		}
		body, _ := io.ReadAll(resp.Body)
		resp.Body.Close()
		r = r.plus(countRequests(body, "nodeward_api_requests_total{", "method"))
	}
	return r
}

// scrapeRequests sums apiserver_request_total: every request, and the
// writes.
func scrapeRequests(b *testing.B, cp *cluster.ControlPlane) rate {
	b.Helper()
	body, err := cp.Client().CoreV1().RESTClient().Get().AbsPath("/metrics").DoRaw(context.Background())
	if err != nil {
		b.Fatalf("scrape the API server: %v", err)
	}
	return countRequests(body, "apiserver_request_total{", "verb")
}

// countRequests sums the samples of a request counter (series starting
// with prefix) in a Prometheus text exposition: all of them, and the
// writes, whose label methodLabel is POST, PUT, PATCH or DELETE (in any
// case: client_golang's round-tripper counter writes them lower case).
func countRequests(body []byte, prefix, methodLabel string) rate {
	var r rate
	for _, line := range strings.Split(string(body), "\n") {
		if !strings.HasPrefix(line, prefix) {
			continue
		}
		f := strings.Fields(line)
		v, _ := strconv.ParseFloat(f[len(f)-1], 64)
		r.all += v
		for _, m := range []string{"post", "put", "patch", "delete"} {
			if strings.Contains(strings.ToLower(line), methodLabel+`="`+m+`"`) {
				r.writes += v
			}
		}
	}
	return r
}

func (r rate) plus(o rate) rate { return rate{all: r.all + o.all, writes: r.writes + o.writes} }

// fleetRSS sums the agents' resident memory, in MiB.
func fleetRSS(procs map[string]*sim.ProcNode) float64 {
	total := 0.0
	for _, n := range procs {
		r, err := footprint.ReadResident(fmt.Sprintf("/proc/%d/status", n.Pid()))
		if err != nil {
			continue // an agent between two processes
		}
		total += float64(r.Total) / (1 << 20)
	}
	return total
}
