package health

import (
	"bufio"
	"context"
	"fmt"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"

	"golang.org/x/sys/unix"

	"github.com/nodeward/nodeward/footprint"
	"github.com/nodeward/nodeward/test/cluster"
)

// BenchmarkAgentIdle runs the real `nodeward agent` binary, built as
// `make image` builds it (static, -trimpath, grpcnotrace), against the
// control plane with the default configuration (runtime probe off: no
// containerd here) and measures, over an idle window (NODEWARD_BENCH_IDLE,
// default 2m): RSS at the end, CPU as a share of one core, and API
// requests per minute (all, and writes) from the agent's own
// nodeward_api_requests_total. Run it with -benchtime 1x. In the same run,
// on a node of its own and from a copy of its own of the binary, a second
// agent runs with --release-startup-memory=false, and Debian's
// prometheus-node-exporter runs beside both, read from disk too and scraped
// as often; every RSS is reported idle and after a scrape, with the ratios.
// A third agent, on a third node and from a third copy, runs with the
// memory PSI threshold on the kernel's trigger (a 2 s window, which the
// kernel gives an unprivileged agent too) instead of the default 1 s one:
// where the kernel refuses 1 s (no CAP_SYS_RESOURCE) the first agent polls
// the stall totals every 100 ms and this one does not, so the difference
// of their CPU is the polling's. CPU is read twice: from /proc/<pid>/stat
// (CPU-%, 10 ms ticks) and, finer, the nanoseconds on CPU of every thread
// (/proc/<pid>/task/*/schedstat: CPU-ns-%), for node_exporter too.
// NODEWARD_BENCH_BINARY runs a prebuilt binary instead of building this
// tree; NODEWARD_BENCH_PAGECACHE=warm skips dropping the binaries from the
// page cache before the start (see dropFromPageCache's caller).
func BenchmarkAgentIdle(b *testing.B) {
	cp := env.ControlPlane(b)
	ensureLeaseNamespace(b, cp.Client())
	nodes := cp.CreateNodes(b, cluster.NodeSpec{Prefix: "bench-idle", Count: 3})
	idle := 2 * time.Minute
	if v := os.Getenv("NODEWARD_BENCH_IDLE"); v != "" {
		d, err := time.ParseDuration(v)
		if err != nil {
			b.Fatalf("NODEWARD_BENCH_IDLE: %v", err)
		}
		idle = d
	}
	dir := b.TempDir()
	bin := filepath.Join(dir, "nodeward")
	if prebuilt := os.Getenv("NODEWARD_BENCH_BINARY"); prebuilt != "" {
		// A binary built elsewhere (another commit, for a before/after).
		copyFile(b, prebuilt, bin)
	} else {
		// The binary the image ships; copied like a prebuilt one, so that
		// both ways measure a file of their own, written just now.
		built, err := cluster.NodewardBinary(cluster.StaticBuild)
		if err != nil {
			b.Fatal(err)
		}
		copyFile(b, built, bin)
	}
	// The agent without the release runs a copy: two processes mapping one
	// file would share its page cache, and each would map what the other
	// read.
	kept := filepath.Join(dir, "nodeward-kept")
	copyFile(b, bin, kept)
	noPoll := filepath.Join(dir, "nodeward-nopoll")
	copyFile(b, bin, noPoll)
	cfgPath := filepath.Join(dir, "nodeward.yaml")
	if err := os.WriteFile(cfgPath, []byte("runtime: {enabled: false}\n"), 0o600); err != nil {
		b.Fatal(err)
	}
	noPollCfg := filepath.Join(dir, "nodeward-nopoll.yaml")
	if err := os.WriteFile(noPollCfg, []byte("runtime: {enabled: false}\nmemory: {trigger: \"full 150000 2000000\"}\n"), 0o600); err != nil {
		b.Fatal(err)
	}
	start := func(bin, node, logName, cfgPath string, extra ...string) (*exec.Cmd, string) {
		// The file-backed RSS depends on how the binary's pages came into
		// the page cache: a file just written is cached in other (larger)
		// chunks than one read from disk, and a fault maps a whole cached
		// chunk. By default the binary is dropped from the page cache so
		// that the agent loads it from disk, as after a node's reboot,
		// which is repeatable; NODEWARD_BENCH_PAGECACHE=warm keeps the
		// pages of the fresh write.
		if os.Getenv("NODEWARD_BENCH_PAGECACHE") != "warm" {
			dropFromPageCache(b, bin)
		}
		addr := freeAddr(b)
		args := append([]string{"agent", "--kubeconfig", cp.KubeconfigPath(), "--node-name", node,
			"--metrics-address", addr, "--config", cfgPath,
			// This host has no rpm-ostree: measure the health half, which
			// is what runs between updates.
			"--updates=false"}, extra...)
		return serve(b, filepath.Join(dir, logName), "http://"+addr+"/readyz", bin, args...), addr
	}
	agent, addr := start(bin, nodes[0], "agent.log", cfgPath)
	agentKept, addrKept := start(kept, nodes[1], "agent-kept.log", cfgPath, "--release-startup-memory=false")
	agentNoPoll, _ := start(noPoll, nodes[2], "agent-nopoll.log", noPollCfg)
	peer := startNodeExporter(b, dir)
	// Let start-up settle (first Lease, first publication) before the window.
	time.Sleep(5 * time.Second)

	b.ResetTimer()
	cpu0, faults0 := procStat(b, agent.Process.Pid)
	noPollCPU0, _ := procStat(b, agentNoPoll.Process.Pid)
	ns0, noPollNS0, peerNS0 := cpuNS(b, agent.Process.Pid), cpuNS(b, agentNoPoll.Process.Pid), peer.cpuNS(b)
	first := scrapeLines(b, addr) // the agent's first scrape
	alloc0 := runtimeCounters(first)
	reqs0, writes0 := apiRequests(first)
	scrapeLines(b, addrKept) // the other agent's
	peer.scrape(b)           // and the peer's
	began := time.Now()
	for range b.N {
		time.Sleep(idle / time.Duration(b.N))
	}
	elapsed := time.Since(began)
	cpu1, faults1 := procStat(b, agent.Process.Pid)
	noPollCPU1, _ := procStat(b, agentNoPoll.Process.Pid)
	ns1, noPollNS1, peerNS1 := cpuNS(b, agent.Process.Pid), cpuNS(b, agentNoPoll.Process.Pid), peer.cpuNS(b)
	_, keptFaults := procStat(b, agentKept.Process.Pid)
	idleRSS, keptRSS := readRSS(b, agent.Process.Pid), readRSS(b, agentKept.Process.Pid)
	last := scrapeLines(b, addr)
	alloc1 := runtimeCounters(last)
	reqs1, writes1 := apiRequests(last)
	b.StopTimer()

	minutes := elapsed.Minutes()
	scraped := readRSS(b, agent.Process.Pid)
	scrapeLines(b, addrKept)
	keptScraped := readRSS(b, agentKept.Process.Pid)
	// Idle: at the end of the window, before its second scrape; then
	// after it. Anonymous memory (heap, stacks) apart from the mapped
	// binary.
	idleRSS.report(b, "")
	scraped.report(b, "scraped-")
	keptRSS.report(b, "no-release-")
	keptScraped.report(b, "no-release-scraped-")
	b.ReportMetric(idleRSS.total/keptRSS.total, "RSS/no-release")
	if peer != nil {
		peerIdle := readRSS(b, peer.cmd.Process.Pid)
		peer.scrape(b)
		peerScraped := readRSS(b, peer.cmd.Process.Pid)
		peerIdle.report(b, "node-exporter-")
		peerScraped.report(b, "node-exporter-scraped-")
		b.ReportMetric(idleRSS.total/peerIdle.total, "RSS/node-exporter")
		b.ReportMetric(scraped.total/peerScraped.total, "scraped-RSS/node-exporter")
		b.ReportMetric(keptRSS.total/peerIdle.total, "no-release-RSS/node-exporter")
	}
	// Where the agent's anonymous memory goes, as its Go runtime counts it
	// (go test -v); read last, since a scrape moves the RSS.
	b.Logf("the agent's Go runtime memory after the window:\n%s", runtimeMemory(scrapeLines(b, addr)))
	// Which parts of the binary the file-backed pages are (go test -v).
	for _, p := range []struct {
		name string
		pid  int
	}{{"the agent", agent.Process.Pid}, {"the agent without the release", agentKept.Process.Pid}} {
		if out, err := exec.Command("go", "run", "github.com/nodeward/nodeward/test/bench/health/rssmap",
			strconv.Itoa(p.pid)).CombinedOutput(); err != nil {
			b.Logf("rssmap: %v: %s", err, out)
		} else {
			b.Logf("binary %.1f MB; resident pages of the binary by section, %s:\n%s", fileMB(b, bin), p.name, out)
		}
	}
	b.ReportMetric(100*(cpu1-cpu0)/elapsed.Seconds(), "CPU-%")
	b.ReportMetric(100*(noPollCPU1-noPollCPU0)/elapsed.Seconds(), "no-poll-CPU-%")
	nsPct := func(ns float64) float64 { return 100 * ns / float64(elapsed.Nanoseconds()) }
	b.ReportMetric(nsPct(ns1-ns0), "CPU-ns-%")
	b.ReportMetric(nsPct(noPollNS1-noPollNS0), "no-poll-CPU-ns-%")
	b.ReportMetric(nsPct((ns1-ns0)-(noPollNS1-noPollNS0)), "polling-CPU-ns-%")
	if peer != nil {
		b.ReportMetric(nsPct(peerNS1-peerNS0), "node-exporter-CPU-ns-%")
	}
	// What the release costs: the pages read back from the executable,
	// one fault each, in the window and since the start (the agent
	// without the release read its binary once, at start-up).
	b.ReportMetric(faults1-faults0, "idle-major-faults")
	b.ReportMetric(faults1, "major-faults")
	b.ReportMetric(keptFaults, "no-release-major-faults")
	b.ReportMetric((reqs1-reqs0)/minutes, "requests/min")
	b.ReportMetric((writes1-writes0)/minutes, "writes/min")
	b.ReportMetric(minutes, "idle-min")
	// What the agent allocates while idle (what its two scrapes allocate
	// included) decides how soon its heap grows to the collector's goal.
	b.ReportMetric((alloc1.allocated-alloc0.allocated)/1024/elapsed.Seconds(), "idle-alloc-KiB/s")
	b.ReportMetric(alloc1.collections-alloc0.collections, "idle-GCs")
	b.ReportMetric(0, "ns/op")
}

// copyFile copies an executable (mode 0755).
func copyFile(b *testing.B, from, to string) {
	data, err := os.ReadFile(from)
	if err != nil {
		b.Fatal(err)
	}
	if err := os.WriteFile(to, data, 0o755); err != nil {
		b.Fatal(err)
	}
}

// rss is a process's resident memory, MiB: all, anonymous, file-backed.
type rss struct{ total, anon, file float64 }

func readRSS(b *testing.B, pid int) rss {
	r, err := footprint.ReadResident(fmt.Sprintf("/proc/%d/status", pid))
	if err != nil {
		b.Fatal(err)
	}
	mib := func(bytes uint64) float64 { return float64(bytes) / (1 << 20) }
	return rss{mib(r.Total), mib(r.Anon), mib(r.File)}
}

func (r rss) report(b *testing.B, prefix string) {
	b.ReportMetric(r.total, prefix+"RSS-MiB")
	b.ReportMetric(r.anon, prefix+"RSS-anon-MiB")
	b.ReportMetric(r.file, prefix+"RSS-file-MiB")
}

// nodeExporter is Debian's prometheus-node-exporter run beside the agent:
// the peer operators compare every node agent with.
type nodeExporter struct {
	cmd  *exec.Cmd
	addr string
}

// startNodeExporter starts the peer from a copy of its binary dropped from
// the page cache, as the agent's is, so both are read from disk.
// NODEWARD_BENCH_PEER=off measures the agent alone.
func startNodeExporter(b *testing.B, dir string) *nodeExporter {
	if os.Getenv("NODEWARD_BENCH_PEER") == "off" {
		return nil
	}
	path, err := exec.LookPath("prometheus-node-exporter")
	if err != nil {
		b.Fatalf("the side-by-side RSS needs prometheus-node-exporter (Debian package prometheus-node-exporter; NODEWARD_BENCH_PEER=off skips it): %v", err)
	}
	bin := filepath.Join(dir, "node_exporter")
	copyFile(b, path, bin)
	if os.Getenv("NODEWARD_BENCH_PAGECACHE") != "warm" {
		dropFromPageCache(b, bin)
	}
	addr := freeAddr(b)
	cmd := serve(b, filepath.Join(dir, "node_exporter.log"), "http://"+addr+"/", bin, "--web.listen-address="+addr)
	return &nodeExporter{cmd: cmd, addr: addr}
}

// freeAddr is a free loopback address for a server to listen on.
func freeAddr(b *testing.B) string {
	addr, err := cluster.FreeAddr()
	if err != nil {
		b.Fatal(err)
	}
	return addr
}

// serve starts bin with args, its output in logPath, stops it (SIGINT)
// when the benchmark ends, and waits until ready answers 200.
func serve(b *testing.B, logPath, ready, bin string, args ...string) *exec.Cmd {
	cmd := exec.Command(bin, args...)
	logFile, err := os.Create(logPath)
	if err != nil {
		b.Fatal(err)
	}
	cmd.Stdout, cmd.Stderr = logFile, logFile
	if err := cmd.Start(); err != nil {
		b.Fatal(err)
	}
	b.Cleanup(func() { cmd.Process.Signal(os.Interrupt); cmd.Wait(); logFile.Close() })
	cluster.WaitFor(b, 30*time.Second, filepath.Base(bin)+" answering "+ready, func(ctx context.Context) (bool, error) {
		resp, err := http.Get(ready)
		if err != nil {
			return false, err
		}
		resp.Body.Close()
		return resp.StatusCode == http.StatusOK, nil
	})
	return cmd
}

// scrape reads the peer's /metrics once, as Prometheus would.
func (n *nodeExporter) scrape(b *testing.B) {
	if n != nil {
		scrapeLines(b, n.addr)
	}
}

// scrapeLines reads addr's /metrics whole, as Prometheus would, and
// returns its lines.
func scrapeLines(b *testing.B, addr string) []string {
	resp, err := http.Get("http://" + addr + "/metrics")
	if err != nil {
		b.Fatal(err)
	}
	defer resp.Body.Close()
	var lines []string
	s := bufio.NewScanner(resp.Body)
	for s.Scan() {
		lines = append(lines, s.Text())
	}
	if err := s.Err(); err != nil {
		b.Fatalf("read %s/metrics: %v", addr, err)
	}
	return lines
}

// cpuNS is the time a process's threads have been on a CPU, in ns, summed
// over its live threads (/proc/<pid>/task/*/schedstat, first field).
func cpuNS(b *testing.B, pid int) float64 {
	tasks, err := filepath.Glob(fmt.Sprintf("/proc/%d/task/*/schedstat", pid))
	if err != nil || len(tasks) == 0 {
		b.Fatalf("threads of %d: %v", pid, err)
	}
	var sum float64
	for _, t := range tasks {
		data, err := os.ReadFile(t)
		if err != nil {
			continue // the thread exited
		}
		ns, _ := strconv.ParseFloat(strings.Fields(string(data))[0], 64)
		sum += ns
	}
	return sum
}

// cpuNS is the peer's CPU time (ns); 0 without the peer.
func (n *nodeExporter) cpuNS(b *testing.B) float64 {
	if n == nil {
		return 0
	}
	return cpuNS(b, n.cmd.Process.Pid)
}

// procStat reads a process's CPU time in seconds and its major page faults
// (pages it had to read from a file) since its start.
func procStat(b *testing.B, pid int) (cpu, majorFaults float64) {
	data, err := os.ReadFile(fmt.Sprintf("/proc/%d/stat", pid))
	if err != nil {
		b.Fatal(err)
	}
	// Fields after the command name (which may hold spaces): majflt is the
	// 12th field overall, utime the 14th, stime the 15th.
	fields := strings.Fields(string(data[strings.LastIndexByte(string(data), ')')+2:]))
	majflt, _ := strconv.ParseFloat(fields[9], 64)
	utime, _ := strconv.ParseFloat(fields[11], 64)
	stime, _ := strconv.ParseFloat(fields[12], 64)
	return (utime + stime) / 100, majflt // USER_HZ
}

// dropFromPageCache writes the file's dirty pages back and asks the kernel
// to forget its cached pages (this file's only).
func dropFromPageCache(b *testing.B, path string) {
	f, err := os.Open(path)
	if err != nil {
		b.Fatal(err)
	}
	defer f.Close()
	if err := f.Sync(); err != nil {
		b.Fatalf("sync %s: %v", path, err)
	}
	if err := unix.Fadvise(int(f.Fd()), 0, 0, unix.FADV_DONTNEED); err != nil {
		b.Fatalf("drop %s from the page cache: %v", path, err)
	}
}

func fileMB(b *testing.B, path string) float64 {
	fi, err := os.Stat(path)
	if err != nil {
		b.Fatal(err)
	}
	return float64(fi.Size()) / 1e6
}

// apiRequests sums nodeward_api_requests_total in a scrape's lines: all
// methods, and the writing ones.
func apiRequests(lines []string) (all, writes float64) {
	for _, line := range lines {
		if !strings.HasPrefix(line, "nodeward_api_requests_total{") {
			continue
		}
		v, _ := strconv.ParseFloat(line[strings.LastIndexByte(line, ' ')+1:], 64)
		all += v
		if !strings.Contains(line, `method="get"`) {
			writes += v
		}
	}
	return all, writes
}

// runtimeMemory is the Go runtime's own account of a process's memory in
// a scrape of its /metrics (client_golang's Go collector): heap in use, idle and
// released, stacks, the allocator's and the collector's metadata, and the
// goroutine and thread counts, one per line in MiB (counts as they are).
func runtimeMemory(lines []string) string {
	var out strings.Builder
	for _, line := range lines {
		name, value, ok := strings.Cut(line, " ")
		if !ok || !(strings.HasPrefix(name, "go_memstats_") || name == "go_goroutines" || name == "go_threads") {
			continue
		}
		v, _ := strconv.ParseFloat(value, 64)
		if strings.HasSuffix(name, "_bytes") {
			fmt.Fprintf(&out, "  %-40s %8.2f MiB\n", name, v/(1<<20))
		} else if !strings.HasSuffix(name, "_total") {
			fmt.Fprintf(&out, "  %-40s %8.0f\n", name, v)
		}
	}
	return out.String()
}

// allocation is the Go runtime's running totals: bytes allocated, and
// collections.
type allocation struct{ allocated, collections float64 }

// runtimeCounters reads the allocation totals in a scrape's lines.
func runtimeCounters(lines []string) allocation {
	var a allocation
	for _, line := range lines {
		name, value, ok := strings.Cut(line, " ")
		if !ok {
			continue
		}
		v, _ := strconv.ParseFloat(value, 64)
		switch name {
		case "go_memstats_alloc_bytes_total":
			a.allocated = v
		case "go_gc_duration_seconds_count":
			a.collections = v
		}
	}
	return a
}
