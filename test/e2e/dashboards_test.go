package e2e

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"strings"
	"testing"
	"time"

	promv1 "github.com/prometheus/client_golang/api/prometheus/v1"
	"github.com/prometheus/common/model"
	"k8s.io/apimachinery/pkg/util/intstr"
	"k8s.io/utils/ptr"

	v1alpha1 "github.com/nodeward/nodeward/api/v1alpha1"
	"github.com/nodeward/nodeward/test/cluster"
	"github.com/nodeward/nodeward/test/coordinatortest"
	"github.com/nodeward/nodeward/test/kernelevents"
	"github.com/nodeward/nodeward/test/prom"
	"github.com/nodeward/nodeward/test/sim"
	"github.com/nodeward/nodeward/test/testenv"
)

// TestDashboardQueriesReturnData: a real Prometheus scrapes real agent
// processes (three updating under a pool, one health-only with the kernel
// log and OOM kills on) and the coordinator process, labelled as the
// ServiceMonitors label them, through a rollout with a health gate and a
// drain a PodDisruptionBudget blocks for a while, and a real OOM kill in a
// pod cgroup; then every query of every panel of the shipped dashboards
// (manifests/components/monitoring/dashboards, and the console variants of
// the openshift overlay) must have returned data at some point of the run,
// and so must the template variables' queries. A panel that never shows
// anything fails the test, named with its query.
func TestDashboardQueriesReturnData(t *testing.T) {
	t.Parallel()
	begin := time.Now()
	p := newProcPool(t, "dash", 3, 1)
	p8s := startDashboardProcesses(t, p)
	dyn := installPoolAPI(t, p.cp)
	ns := p.cp.Namespace(t)
	blocked := p.names[0]
	release := blockDrain(p.pool, blocked, ns)
	p.createPool(dyn, v1alpha1.UpdatePoolSpec{OSImage: sim.ProcTarget, MaxUnavailable: ptr.To(intstr.FromInt32(1)),
		Gates: &v1alpha1.Gates{Prometheus: p8s.URL, Queries: []v1alpha1.GateQuery{
			{Name: "coordinator-scraped", Query: `count(up{job="nodeward-coordinator"} == 1)`, Min: ptr.To("1")}}},
	})
	// The drain of the pinned node, whenever it is granted, waits on the
	// budget until Prometheus has seen it blocked; then the budget goes
	// and the rollout finishes.
	p8s.WaitValue(t, fmt.Sprintf(`max(nodeward_drain_blocked_pods{node=%q})`, blocked), 1, 3*time.Minute)
	release()
	for _, name := range p.names {
		p.waitStep(name, v1alpha1.StepDone, 3*time.Minute)
		p.assertUpdated(name)
	}
	// Two scrapes after the last Done, so that its metrics are in.
	p8s.WaitValue(t, `count(nodeward_pool_nodes{pool="dash", state="updated"} == 3)`, 1, time.Minute)
	checked := 0
	for _, b := range shippedDashboards(t) {
		for _, q := range b.queries() {
			checked++
			if !returnedData(t, p8s, substitute(q.expr, "dash"), begin) {
				t.Errorf("dashboard %s (%s), %s: no data during the whole run from %s", b.UID, b.file, q.where, q.expr)
			}
		}
	}
	t.Logf("%d queries of the dashboards and their variables returned data over %s", checked, time.Since(begin).Round(time.Second))
}

// startDashboardProcesses starts the pool's agents, a health-only agent
// on a node of its own and the coordinator, each serving /metrics on its
// own address, and a Prometheus scraping them every second as the
// ServiceMonitors would: job nodeward-agent with a node label, job
// nodeward-coordinator.
func startDashboardProcesses(t *testing.T, p *procPool) *prom.Prometheus {
	t.Helper()
	bin, err := procBinaries()
	if err != nil {
		t.Fatal(err)
	}
	agents := prom.ScrapeJob{Name: "nodeward-agent"}
	for _, name := range p.names {
		addr := freeAddr(t)
		p.procs[name].Args = []string{"--metrics-address", addr}
		agents.Targets = append(agents.Targets, prom.LabelledTarget{Addr: addr, Labels: map[string]string{"node": name}})
	}
	health := p.cp.CreateNodes(t, cluster.NodeSpec{Prefix: "healthdash", Count: 1})[0]
	kubepods, container := kubepodsCgroup(t)
	healthAddr, coordAddr, logs := freeAddr(t), freeAddr(t), t.TempDir()
	agents.Targets = append(agents.Targets, prom.LabelledTarget{Addr: healthAddr, Labels: map[string]string{"node": health}})
	// The kernel log and the OOM kills on, as components/kernel-events
	// turns them on, on this machine's /dev/kmsg and the test's kubepods.
	config := filepath.Join(logs, "health-agent.yaml")
	err = os.WriteFile(config, []byte("apiVersion: nodeward.io/v1alpha1\nkind: AgentConfig\n"+
		"kernel: {enabled: true}\noomKills: {enabled: true, cgroupRoot: "+kubepods+"}\n"), 0o600)
	if err != nil {
		t.Fatal(err)
	}
	start(t, bin.Nodeward, filepath.Join(logs, "health-agent.log"), "agent", "--updates=false", "--config", config,
		"--kubeconfig", p.cp.KubeconfigPath(), "--node-name", health, "--metrics-address", healthAddr)
	startCmd(t, bin.Coordinator(p.cp.KubeconfigPath(), "--metrics-address", coordAddr, "--leader-elect=false",
		"--pool-selector", coordinatortest.PoolLabel+"=dash"), filepath.Join(logs, "coordinator.log"))
	t.Cleanup(func() {
		if t.Failed() {
			t.Logf("the health-only agent's and the coordinator's logs:\n%s", readTail(logs))
		}
	})
	p.startAgents()
	p8s := prom.StartPrometheus(t, prom.PrometheusOptions{Jobs: []prom.ScrapeJob{agents,
		{Name: "nodeward-coordinator", Targets: []prom.LabelledTarget{{Addr: coordAddr}}}}})
	// A real OOM kill in the health-only node's pod cgroup: the OOM kills
	// and, from its kernel log record, the kernel problems panels.
	p8s.WaitValue(t, fmt.Sprintf(`count(nodeward_oom_watched_cgroups{node=%q} > 0)`, health), 1, time.Minute)
	oomKill(t, container)
	// At least one: another process's OOM kill on this machine is a
	// kernel problem too.
	p8s.WaitValue(t, fmt.Sprintf(`count(nodeward_oom_kills_total{node=%q} >= 1)`, health), 1, time.Minute)
	p8s.WaitValue(t, fmt.Sprintf(`count(nodeward_kernel_problems_total{node=%q, reason="OOMKilling"} >= 1)`, health), 1, time.Minute)
	return p8s
}

// kubepodsCgroup makes a kubepods memory cgroup of the test's own with one
// container's cgroup in it, laid out as the kubelet's cgroupfs driver lays
// out a pod's, limited to 16 MiB without swap; t's cleanup removes them.
func kubepodsCgroup(t *testing.T) (kubepods, container string) {
	t.Helper()
	testenv.RequireRoot(t)
	const memory = "/sys/fs/cgroup/memory"
	_, err := os.Stat(filepath.Join(memory, "memory.oom_control"))
	testenv.Require(t, err == nil, "no cgroup v1 memory hierarchy at "+memory)
	kernelevents.Lock(t) // an OOM kill writes its report to the kernel log
	kubepods = filepath.Join(memory, fmt.Sprintf("nodeward-dash-%d", os.Getpid()), "kubepods")
	container = filepath.Join(kubepods, "burstable", "pod6a1f0c2e-5b7d-4e8a-9c3f-2d4b6e8f0a1c", strings.Repeat("d0", 32))
	testenv.MakeCgroups(t, memory, container)
	if err := os.WriteFile(filepath.Join(container, "memory.limit_in_bytes"), []byte("16777216"), 0); err != nil {
		t.Fatal(err)
	}
	_ = os.WriteFile(filepath.Join(container, "memory.swappiness"), []byte("0"), 0)
	return kubepods, container
}

// oomKill runs a process in container's cgroup that allocates until the
// kernel's OOM killer ends it.
func oomKill(t *testing.T, container string) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	hog := exec.CommandContext(ctx, "sh", "-c", "echo $$ > "+filepath.Join(container, "cgroup.procs")+" && exec tail /dev/zero")
	err := hog.Run()
	var exit *exec.ExitError
	if !errors.As(err, &exit) || ctx.Err() != nil {
		t.Fatalf("the process in %s ended with %v, want an OOM kill", container, err)
	}
}

// dashboardJSON is what the test reads of a dashboard: its variables'
// queries and its panels' queries.
type dashboardJSON struct {
	file       string // under manifests/
	UID        string `json:"uid"`
	Templating struct {
		List []struct {
			Name       string `json:"name"`
			Type       string `json:"type"`
			Definition string `json:"definition"`
		} `json:"list"`
	} `json:"templating"`
	Panels []struct {
		ID      int    `json:"id"`
		Title   string `json:"title"`
		Targets []struct {
			Expr string `json:"expr"`
		} `json:"targets"`
	} `json:"panels"`
}

// panelQuery is one query of a dashboard and where it is.
type panelQuery struct{ where, expr string }

// queries lists the panels' queries and the variables' label_values
// queries as PromQL (label_values(m, l) → count by (l) (m)).
func (d dashboardJSON) queries() []panelQuery {
	var out []panelQuery
	for _, v := range d.Templating.List {
		if v.Type != "query" {
			continue
		}
		inner, ok := strings.CutPrefix(v.Definition, "label_values(")
		i := strings.LastIndex(inner, ",")
		if !ok || i < 0 {
			out = append(out, panelQuery{"variable $" + v.Name, "unparsed: " + v.Definition})
			continue
		}
		label := strings.TrimSuffix(strings.TrimSpace(inner[i+1:]), ")")
		out = append(out, panelQuery{"variable $" + v.Name, fmt.Sprintf("count by (%s) (%s)", label, inner[:i])})
	}
	for _, p := range d.Panels {
		for _, q := range p.Targets {
			out = append(out, panelQuery{fmt.Sprintf("panel %d %q", p.ID, p.Title), q.Expr})
		}
	}
	return out
}

// shippedDashboards reads the Grafana dashboards the monitoring component
// ships and their OpenShift console variants.
func shippedDashboards(t *testing.T) []dashboardJSON {
	t.Helper()
	_, file, _, _ := runtime.Caller(0)
	manifests := filepath.Join(filepath.Dir(file), "..", "..", "manifests")
	grafana, _ := filepath.Glob(filepath.Join(manifests, "components", "monitoring", "dashboards", "*.json"))
	console, _ := filepath.Glob(filepath.Join(manifests, "overlays", "openshift", "dashboards", "*.json"))
	if len(grafana) == 0 || len(console) == 0 {
		t.Fatalf("dashboards found: %d for Grafana, %d for the console; want both", len(grafana), len(console))
	}
	files := append(grafana, console...)
	var out []dashboardJSON
	for _, f := range files {
		raw, err := os.ReadFile(f)
		if err != nil {
			t.Fatal(err)
		}
		var d dashboardJSON
		if err := json.Unmarshal(raw, &d); err != nil {
			t.Fatalf("%s: %v", f, err)
		}
		d.file, _ = filepath.Rel(manifests, f)
		out = append(out, d)
	}
	return out
}

// substitute fills in the template variables as Grafana would with the
// pool chosen and All nodes, and the rate interval for 1 s scrapes.
func substitute(expr, pool string) string {
	return strings.NewReplacer("$pool", pool, "$node", ".*", "$__rate_interval", "1m").Replace(expr)
}

// returnedData: expr, evaluated every second from begin to now, had at
// least one sample.
func returnedData(t *testing.T, p8s *prom.Prometheus, expr string, begin time.Time) bool {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	v, _, _, err := p8s.API().QueryRange(ctx, expr, promv1.Range{Start: begin, End: time.Now(), Step: time.Second})
	if err != nil {
		t.Errorf("query %s: %v", expr, err)
		return true // reported above, not as missing data
	}
	m, ok := v.(model.Matrix)
	if !ok {
		t.Errorf("query %s: a %s, want a matrix", expr, v.Type())
		return true
	}
	for _, s := range m {
		if len(s.Values) > 0 {
			return true
		}
	}
	return false
}
