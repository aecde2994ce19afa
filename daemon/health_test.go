package daemon

import (
	"bytes"
	"context"
	"fmt"
	"io"
	"log/slog"
	"net/http"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	coordinationv1 "k8s.io/api/coordination/v1"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/rest"
	"k8s.io/client-go/util/retry"

	"github.com/nodeward/nodeward/api/v1alpha1"
	"github.com/nodeward/nodeward/conditions"
	"github.com/nodeward/nodeward/daemon/health"
	"github.com/nodeward/nodeward/test/cluster"
)

var env cluster.Env

func TestMain(m *testing.M) { os.Exit(env.Run(m)) }

// fixtureHost is a fixture /proc whose memory and PID readings a test sets.
type fixtureHost struct {
	t    *testing.T
	root string
}

func newFixtureHost(t *testing.T) *fixtureHost {
	h := &fixtureHost{t: t, root: t.TempDir()}
	for name, content := range map[string]string{
		"loadavg": "0.1 0.1 0.1 1/300 42\n", "sys/kernel/pid_max": "32768\n", "sys/kernel/threads-max": "100000\n",
		"pressure/memory": "some avg10=0.00 avg60=0.00 avg300=0.00 total=1\nfull avg10=0.00 avg60=0.00 avg300=0.00 total=1\n",
	} {
		h.write(name, content)
	}
	h.setMemAvailablePercent(50)
	return h
}

func (h *fixtureHost) write(name, content string) {
	path := filepath.Join(h.root, name)
	if err := os.MkdirAll(filepath.Dir(path), 0o755); err != nil {
		h.t.Fatal(err)
	}
	// Rename into place: a probe never reads a half-written file.
	if err := os.WriteFile(path+".tmp", []byte(content), 0o644); err != nil {
		h.t.Fatal(err)
	}
	if err := os.Rename(path+".tmp", path); err != nil {
		h.t.Fatal(err)
	}
}

func (h *fixtureHost) setMemAvailablePercent(p int) {
	h.write("meminfo", fmt.Sprintf("MemTotal: 1000000 kB\nMemFree: 1000 kB\nMemAvailable: %d kB\n", p*10000))
}

// fixtureConfig probes only the fixture's memory and PIDs, fast, with a
// short quiet period.
func fixtureConfig(root string) FileConfig {
	cfg := DefaultFileConfig()
	cfg.ProcRoot = root
	cfg.MetricsAddress = "127.0.0.1:0"
	cfg.Memory.Trigger = ""
	cfg.Memory.PollInterval.Duration = 50 * time.Millisecond
	cfg.PIDs.PollInterval.Duration = 50 * time.Millisecond
	cfg.Disk.Enabled, cfg.Network.Enabled, cfg.Runtime.Enabled = false, false, false
	cfg.Hysteresis.QuietPeriod.Duration = 500 * time.Millisecond
	cfg.LeaseRenewInterval.Duration = time.Second
	return cfg
}

// statusWrites records the bodies of every write to a Node's status.
type statusWrites struct {
	mu     sync.Mutex
	bodies []string
}

func (w *statusWrites) wrap(cfg *rest.Config) *rest.Config {
	cfg.Wrap(func(rt http.RoundTripper) http.RoundTripper {
		return roundTripFunc(func(req *http.Request) (*http.Response, error) {
			if req.Method != http.MethodGet && strings.HasSuffix(req.URL.Path, "/status") && req.Body != nil {
				body, _ := io.ReadAll(req.Body)
				req.Body = io.NopCloser(bytes.NewReader(body))
				w.mu.Lock()
				w.bodies = append(w.bodies, string(body))
				w.mu.Unlock()
			}
			return rt.RoundTrip(req)
		})
	})
	return cfg
}

type roundTripFunc func(*http.Request) (*http.Response, error)

func (f roundTripFunc) RoundTrip(req *http.Request) (*http.Response, error) { return f(req) }

// startHealth runs the real agent with its health half only.
func startHealth(t *testing.T, rc *rest.Config, node string, cfg FileConfig, guard conditions.DisruptionGuard) *Agent {
	t.Helper()
	h, err := New(Config{
		RestConfig: rc, NodeName: node, Health: &HealthConfig{Conditions: cfg.Config, LeaseRenewInterval: cfg.LeaseRenewInterval.Duration, Guard: guard},
		MetricsAddress: cfg.MetricsAddress, MetricsAuth: cfg.MetricsAuthConfig(),
		Log: slog.New(slog.NewTextHandler(os.Stderr, &slog.HandlerOptions{Level: slog.LevelWarn})),
	})
	if err != nil {
		t.Fatal(err)
	}
	runAgent(t, h)
	return h
}

// runAgent runs h until the test ends.
func runAgent(t *testing.T, h *Agent) {
	t.Helper()
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- h.Run(ctx) }()
	t.Cleanup(func() {
		cancel()
		if err := <-done; err != nil {
			t.Errorf("agent Run: %v", err)
		}
	})
}

func ensureLeaseNamespace(t *testing.T, client kubernetes.Interface) {
	_, err := client.CoreV1().Namespaces().Create(context.Background(),
		&corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: v1alpha1.AgentLeaseNamespace}}, metav1.CreateOptions{})
	if err != nil && !apierrors.IsAlreadyExists(err) {
		t.Fatal(err)
	}
}

func nodeCondition(node *corev1.Node, t corev1.NodeConditionType) *corev1.NodeCondition {
	for i := range node.Status.Conditions {
		if node.Status.Conditions[i].Type == t {
			return &node.Status.Conditions[i]
		}
	}
	return nil
}

func hasTaint(node *corev1.Node, key string, effect corev1.TaintEffect) bool {
	for _, t := range node.Spec.Taints {
		if t.Key == key && t.Effect == effect {
			return true
		}
	}
	return false
}

func waitNode(t *testing.T, client kubernetes.Interface, name, what string, ok func(*corev1.Node) bool) {
	t.Helper()
	cluster.WaitFor(t, 30*time.Second, what, func(ctx context.Context) (bool, error) {
		node, err := client.CoreV1().Nodes().Get(ctx, name, metav1.GetOptions{})
		if err != nil {
			return false, err
		}
		return ok(node), nil
	})
}

const memoryTaint = "nodeward.io/memory-pressure"

// TestHealthPublishesConditionsTaintsAndLease: conditions appear, a taint
// follows memory pressure and clears after the quiet period, a foreign
// taint and a concurrent editor's taints survive, the Lease is renewed,
// and no kubelet-owned condition is ever written.
func TestHealthPublishesConditionsTaintsAndLease(t *testing.T) {
	t.Parallel()
	cp := env.ControlPlane(t)
	client := cp.Client()
	ensureLeaseNamespace(t, client)
	foreign := corev1.Taint{Key: "example.com/foreign", Value: "x", Effect: corev1.TaintEffectNoSchedule}
	node := cp.CreateNodes(t, cluster.NodeSpec{Prefix: "health-a", Count: 1, Taints: []corev1.Taint{foreign}})[0]
	host := newFixtureHost(t)
	var writes statusWrites
	h := startHealth(t, writes.wrap(cp.Config()), node, fixtureConfig(host.root), nil)

	waitNode(t, client, node, "memory and PID conditions False", func(n *corev1.Node) bool {
		m, p := nodeCondition(n, v1alpha1.ConditionMemoryPressure), nodeCondition(n, v1alpha1.ConditionPIDPressure)
		return m != nil && p != nil && m.Status == corev1.ConditionFalse && p.Status == corev1.ConditionFalse
	})
	cluster.WaitFor(t, 10*time.Second, "agent ready", func(context.Context) (bool, error) { ok, _ := h.Ready(); return ok, nil })
	// The Lease is written beside the conditions, not before readiness.
	var lease *coordinationv1.Lease
	cluster.WaitFor(t, 10*time.Second, "liveness Lease", func(ctx context.Context) (bool, error) {
		l, err := client.CoordinationV1().Leases(v1alpha1.AgentLeaseNamespace).Get(ctx, v1alpha1.AgentLeaseName(node), metav1.GetOptions{})
		if apierrors.IsNotFound(err) {
			return false, nil
		}
		lease = l
		return err == nil, err
	})
	if *lease.Spec.HolderIdentity != node || len(lease.OwnerReferences) != 1 || lease.OwnerReferences[0].Name != node {
		t.Errorf("Lease holder %q owners %+v, want the node", *lease.Spec.HolderIdentity, lease.OwnerReferences)
	}
	firstRenew := lease.Spec.RenewTime.Time
	cluster.WaitFor(t, 10*time.Second, "Lease renewed", func(ctx context.Context) (bool, error) {
		l, err := client.CoordinationV1().Leases(v1alpha1.AgentLeaseNamespace).Get(ctx, v1alpha1.AgentLeaseName(node), metav1.GetOptions{})
		return err == nil && l.Spec.RenewTime.After(firstRenew), err
	})

	// A concurrent editor adds taints one by one while the condition flips.
	editorDone := make(chan error, 1)
	go func() { editorDone <- addTaints(client, node, "example.com/editor", 15) }()
	for range 3 {
		host.setMemAvailablePercent(1)
		waitNode(t, client, node, "memory taint applied", func(n *corev1.Node) bool {
			c := nodeCondition(n, v1alpha1.ConditionMemoryPressure)
			return c != nil && c.Status == corev1.ConditionTrue && c.Reason == "MemoryPressure" &&
				hasTaint(n, memoryTaint, corev1.TaintEffectNoSchedule)
		})
		host.setMemAvailablePercent(50)
		waitNode(t, client, node, "memory taint removed", func(n *corev1.Node) bool {
			c := nodeCondition(n, v1alpha1.ConditionMemoryPressure)
			return c.Status == corev1.ConditionFalse && !hasTaint(n, memoryTaint, corev1.TaintEffectNoSchedule)
		})
	}
	if err := <-editorDone; err != nil {
		t.Fatalf("concurrent editor: %v", err)
	}
	final, err := client.CoreV1().Nodes().Get(context.Background(), node, metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	if !hasTaint(final, foreign.Key, foreign.Effect) {
		t.Errorf("foreign taint lost: %+v", final.Spec.Taints)
	}
	for i := range 15 {
		if !hasTaint(final, "example.com/editor-"+strconv.Itoa(i), corev1.TaintEffectNoSchedule) {
			t.Errorf("editor taint %d lost: %+v", i, final.Spec.Taints)
		}
	}

	writes.mu.Lock()
	defer writes.mu.Unlock()
	if len(writes.bodies) == 0 {
		t.Fatal("no status write recorded")
	}
	for _, body := range writes.bodies {
		for _, owned := range []string{`"MemoryPressure"`, `"DiskPressure"`, `"PIDPressure"`, `"NetworkUnavailable"`, `"Ready"`} {
			if strings.Contains(body, `"type":`+owned) {
				t.Errorf("status write touches a condition nodeward does not own (%s): %s", owned, body)
			}
		}
	}
}

// addTaints adds n taints, each with a read-modify-write guarded by the
// resourceVersion, as kubectl does.
func addTaints(client kubernetes.Interface, node, prefix string, n int) error {
	ctx := context.Background()
	for i := range n {
		err := retry.RetryOnConflict(retry.DefaultBackoff, func() error {
			cur, err := client.CoreV1().Nodes().Get(ctx, node, metav1.GetOptions{})
			if err != nil {
				return err
			}
			cur.Spec.Taints = append(cur.Spec.Taints, corev1.Taint{Key: prefix + "-" + strconv.Itoa(i), Effect: corev1.TaintEffectNoSchedule})
			_, err = client.CoreV1().Nodes().Update(ctx, cur, metav1.UpdateOptions{})
			return err
		})
		if err != nil {
			return fmt.Errorf("add taint %d: %w", i, err)
		}
		time.Sleep(20 * time.Millisecond) // spread the edits over the flips
	}
	return nil
}

// TestNoExecuteNeedsTheDisruptionGuard: a NoExecute row is withheld
// while the coordinator publishes no guard and written once a guard allows
// it.
func TestNoExecuteNeedsTheDisruptionGuard(t *testing.T) {
	t.Parallel()
	cp := env.ControlPlane(t)
	client := cp.Client()
	ensureLeaseNamespace(t, client)
	nodes := cp.CreateNodes(t, cluster.NodeSpec{Prefix: "health-guard", Count: 2})
	host := newFixtureHost(t)
	host.setMemAvailablePercent(1)
	cfg := fixtureConfig(host.root)
	cfg.Taints = []conditions.TaintPolicy{{Condition: v1alpha1.ConditionMemoryPressure, Key: "nodeward.io/evict", Effect: corev1.TaintEffectNoExecute}}
	startHealth(t, cp.Config(), nodes[0], cfg, nil) // the coordinator's guard: none published here
	allow := func(context.Context, *corev1.Node, corev1.Taint) bool { return true }
	startHealth(t, cp.Config(), nodes[1], cfg, allow)

	waitNode(t, client, nodes[1], "NoExecute taint with an allowing guard", func(n *corev1.Node) bool {
		return hasTaint(n, "nodeward.io/evict", corev1.TaintEffectNoExecute)
	})
	waitNode(t, client, nodes[0], "memory condition True without a guard", func(n *corev1.Node) bool {
		c := nodeCondition(n, v1alpha1.ConditionMemoryPressure)
		return c != nil && c.Status == corev1.ConditionTrue
	})
	n, err := client.CoreV1().Nodes().Get(context.Background(), nodes[0], metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	if hasTaint(n, "nodeward.io/evict", corev1.TaintEffectNoExecute) {
		t.Error("NoExecute taint written without a disruption guard")
	}
}

// TestCoordinatorGuardReadsThePublishedConfigMap against the API server:
// without a guard NoExecute is refused; with the zone Allowed it is allowed.
func TestCoordinatorGuardReadsThePublishedConfigMap(t *testing.T) {
	cp := env.ControlPlane(t)
	ctx := context.Background()
	nodes := cp.CreateNodes(t, cluster.NodeSpec{Prefix: "guardread", Count: 1, Zones: []string{"guardread-z"}})
	guard := health.CoordinatorGuard(cp.Kube())
	node, err := cp.Client().CoreV1().Nodes().Get(ctx, nodes[0], metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	taint := corev1.Taint{Key: "nodeward.io/memory-pressure", Effect: corev1.TaintEffectNoExecute}
	cms := cp.Client().CoreV1().ConfigMaps(v1alpha1.AgentLeaseNamespace)
	if _, err := cp.Client().CoreV1().Namespaces().Create(ctx, &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: v1alpha1.AgentLeaseNamespace}}, metav1.CreateOptions{}); err != nil && !apierrors.IsAlreadyExists(err) {
		t.Fatal(err)
	}
	_ = cms.Delete(ctx, v1alpha1.GuardConfigMapName, metav1.DeleteOptions{})
	if guard(ctx, node, taint) {
		t.Fatal("no guard published: NoExecute must be refused")
	}
	if _, err := cms.Create(ctx, &corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{Name: v1alpha1.GuardConfigMapName},
		Data: map[string]string{"zone.guardread-z": "Allowed"}}, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = cms.Delete(context.Background(), v1alpha1.GuardConfigMapName, metav1.DeleteOptions{}) })
	if !guard(ctx, node, taint) {
		t.Fatal("zone Allowed: NoExecute must be allowed")
	}
}
