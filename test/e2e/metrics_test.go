package e2e

import (
	"bytes"
	"context"
	"fmt"
	"io"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/intstr"
	"k8s.io/utils/ptr"

	v1alpha1 "github.com/nodeward/nodeward/api/v1alpha1"
	"github.com/nodeward/nodeward/test/cluster"
	"github.com/nodeward/nodeward/test/coordinatortest"
	"github.com/nodeward/nodeward/test/sim"
	"github.com/nodeward/nodeward/test/testenv"
)

// TestScrapesPassPromtool scrapes /metrics of the real processes — an
// agent that updates its node under a coordinator's grant, a health-only
// agent (--updates=false) probing this machine, and the coordinator — and
// runs each scrape through `promtool check metrics`: names, types, units,
// help texts as Prometheus's own linter wants them.
func TestScrapesPassPromtool(t *testing.T) {
	promtool := testenv.RequireBinary(t, "promtool") // Debian package prometheus
	testenv.RequireBinary(t, "dbus-daemon")
	bin, err := procBinaries()
	if err != nil {
		t.Fatal(err)
	}
	cp := env.ControlPlane(t)
	dyn := installPoolAPI(t, cp)
	names := cp.CreateNodes(t, cluster.NodeSpec{Prefix: "scrape", Count: 2})
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()

	updating, health, coord := freeAddr(t), freeAddr(t), freeAddr(t)
	n, err := sim.NewProcNode(bin, names[0], cp.KubeconfigPath(), t.TempDir(), sim.ProcBooted(), sim.ProcImages())
	if err != nil {
		t.Fatal(err)
	}
	n.RebootDelay = 200 * time.Millisecond
	n.Args = []string{"--metrics-address", updating} // the last --metrics-address wins
	// The machine stays up until the scrapes are done: the drain's
	// histogram is the drain's process's, and the agent asks for the
	// reboot within milliseconds of the drain's end.
	n.HoldReboots(true)
	t.Cleanup(n.Close)
	if err := n.Start(); err != nil {
		t.Fatal(err)
	}
	go func() { _ = n.RunReboots(ctx) }()

	logs := t.TempDir()
	healthLog := filepath.Join(logs, "health-agent.log")
	start(t, bin.Nodeward, healthLog, "agent", "--updates=false",
		"--kubeconfig", cp.KubeconfigPath(), "--node-name", names[1], "--metrics-address", health)
	coordCmd := bin.Coordinator(cp.KubeconfigPath(), "--metrics-address", coord, "--leader-elect=false",
		"--pool-selector", coordinatortest.PoolLabel+"=scrape")
	startCmd(t, coordCmd, filepath.Join(logs, "coordinator.log"))

	p := &pool{t: t, cp: cp, prefix: "scrape"}
	p.createPool(dyn, v1alpha1.UpdatePoolSpec{OSImage: sim.ProcTarget, MaxUnavailable: ptr.To(intstr.FromInt32(1)),
		NodeSelector: &metav1.LabelSelector{}})

	for _, s := range []struct {
		what, addr string
		want       []string // families that must be in the scrape before it is checked
	}{
		{"updating agent", updating, []string{"nodeward_update_unavailable_seconds_count", "nodeward_drain_duration_seconds_count",
			"nodeward_update_rollbacks_total", "nodeward_api_requests_total", "nodeward_build_info", "go_goroutines", "process_resident_memory_bytes"}},
		{"health-only agent", health, []string{"nodeward_node_condition", "nodeward_memory_available_bytes",
			"nodeward_api_requests_total", "nodeward_build_info", "process_resident_memory_bytes"}},
		{"coordinator", coord, []string{`nodeward_pool_waiting{pool="scrape"`, `nodeward_update_grants_total{pool="scrape"} 1`,
			`nodeward_api_requests_total{code="200",component="coordinator"`, "nodeward_build_info", "process_resident_memory_bytes"}},
	} {
		body := scrapeUntil(t, s.addr, s.want, 2*time.Minute, func() string { return n.LogTail(3000) + "\n" + readTail(logs) })
		cmd := exec.Command(promtool, "check", "metrics")
		cmd.Stdin = bytes.NewReader(body)
		out, err := cmd.CombinedOutput()
		if err != nil || len(bytes.TrimSpace(out)) > 0 {
			t.Errorf("promtool check metrics on the %s's scrape: %v\n%s", s.what, err, out)
		}
	}
	n.HoldReboots(false)
	checkStartupMemoryReleased(t, healthLog)
	// The agent answers uncompressed even when asked for gzip (its page is
	// small; a gzip writer is 0.8 MiB of resident tables).
	req, _ := http.NewRequest(http.MethodGet, "http://"+health+"/metrics", nil)
	req.Header.Set("Accept-Encoding", "gzip")
	resp, err := http.DefaultTransport.RoundTrip(req)
	if err != nil {
		t.Fatal(err)
	}
	body, _ := io.ReadAll(resp.Body)
	resp.Body.Close()
	if enc := resp.Header.Get("Content-Encoding"); enc != "" || !bytes.Contains(body, []byte("nodeward_build_info")) {
		t.Errorf("the agent's /metrics asked for gzip: Content-Encoding %q, %d bytes, want plain text", enc, len(body))
	}
	t.Logf("the health-only agent's /metrics page: %d bytes", len(body))
}

// checkStartupMemoryReleased: a health-only agent with the default flags,
// ready and scraped above, released its start-up memory once (package
// footprint) and its resident set fell by it.
func checkStartupMemoryReleased(t *testing.T, logPath string) {
	t.Helper()
	// The release follows readiness by about a second; the scrapes above
	// may all be done before it.
	var line string
	cluster.WaitFor(t, 30*time.Second, "the agent's log of the release of its start-up memory", func(context.Context) (bool, error) {
		data, err := os.ReadFile(logPath)
		for l := range strings.Lines(string(data)) {
			if strings.Contains(l, "released the memory only start-up used") {
				line = l
			}
		}
		return line != "", err
	})
	field := func(key string) float64 {
		_, rest, ok := strings.Cut(line, " "+key+"=")
		value, _, _ := strings.Cut(strings.TrimSpace(rest), " ")
		v, err := strconv.ParseFloat(value, 64)
		if !ok || err != nil {
			t.Fatalf("no number %s in %q", key, line)
		}
		return v
	}
	if before, after := field("file_mib_before"), field("file_mib_after"); after >= before {
		t.Errorf("file-backed RSS %.1f -> %.1f MiB at the release: did not fall (%s)", before, after, line)
	}
}

// freeAddr is a loopback address with a port free now.
func freeAddr(t *testing.T) string {
	t.Helper()
	addr, err := cluster.FreeAddr()
	if err != nil {
		t.Fatal(err)
	}
	return addr
}

// start runs `nodeward args...` until the test ends, its output in logPath.
func start(t *testing.T, nodeward, logPath string, args ...string) {
	t.Helper()
	cmd := exec.Command(nodeward, args...)
	cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true, Pdeathsig: syscall.SIGKILL}
	startCmd(t, cmd, logPath)
}

func startCmd(t *testing.T, cmd *exec.Cmd, logPath string) {
	t.Helper()
	log, err := os.Create(logPath)
	if err != nil {
		t.Fatal(err)
	}
	cmd.Stdout, cmd.Stderr = log, log
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		_ = cmd.Process.Signal(syscall.SIGTERM)
		_ = cmd.Wait()
		log.Close()
	})
}

// scrapeUntil GETs addr's /metrics until the scrape holds every string of
// want, and returns it.
func scrapeUntil(t *testing.T, addr string, want []string, timeout time.Duration, logs func() string) []byte {
	t.Helper()
	deadline := time.Now().Add(timeout)
	var body []byte
	var missing []string
	for time.Now().Before(deadline) {
		body, missing = scrape(addr), nil
		for _, w := range want {
			if !bytes.Contains(body, []byte(w)) {
				missing = append(missing, w)
			}
		}
		if len(missing) == 0 {
			return body
		}
		time.Sleep(500 * time.Millisecond)
	}
	t.Fatalf("http://%s/metrics lacks %s after %s:\n%s\nlogs:\n%s", addr, strings.Join(missing, ", "), timeout, body, logs())
	return nil
}

func scrape(addr string) []byte {
	resp, err := http.Get("http://" + addr + "/metrics")
	if err != nil {
		return []byte(err.Error())
	}
	defer resp.Body.Close()
	b, err := io.ReadAll(resp.Body)
	if err != nil || resp.StatusCode != http.StatusOK {
		return []byte(fmt.Sprintf("status %d: %v\n%s", resp.StatusCode, err, b))
	}
	return b
}

// readTail is the end of every log in dir.
func readTail(dir string) string {
	var out strings.Builder
	entries, _ := os.ReadDir(dir)
	for _, e := range entries {
		b, _ := os.ReadFile(filepath.Join(dir, e.Name()))
		out.WriteString("== " + e.Name() + "\n" + string(b[max(len(b)-3000, 0):]) + "\n")
	}
	return out.String()
}
