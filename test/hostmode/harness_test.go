package hostmode_test

import (
	"context"
	"fmt"
	"io"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	policyv1 "k8s.io/api/policy/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/apimachinery/pkg/util/intstr"
	"k8s.io/client-go/dynamic"
	"k8s.io/utils/ptr"

	v1alpha1 "github.com/nodeward/nodeward/api/v1alpha1"
	"github.com/nodeward/nodeward/test/cluster"
	"github.com/nodeward/nodeward/test/hostmode"
	"github.com/nodeward/nodeward/test/rpmostree"
	"github.com/nodeward/nodeward/test/sim"
)

// watchdogPeriod is the tests' WatchdogSec (the unit's is 60 s): the agent
// pings every 2 s, and a scenario sees several periods in seconds.
const watchdogPeriod = 4 * time.Second

// poolLabel tells the tests' pools apart; each test's coordinator manages
// only its own.
const poolLabel = "nodeward.test/pool"

// installClusterSide installs, once per run, what host mode needs from
// the cluster (manifests/host/README.md): the UpdatePool CRD, the
// namespace, the agent's ServiceAccount, its RBAC and the admission
// policies that confine it to its node. Not the DaemonSet, which must not
// run on a host-mode node, nor the coordinator's Deployment: the tests run
// the coordinator on the host.
func installClusterSide(cp *cluster.ControlPlane) error {
	clusterSideOnce.Do(func() {
		base := filepath.Join(repoRoot, "manifests", "base")
		args := []string{"--kubeconfig", cp.KubeconfigPath(), "apply", "--server-side", "--field-manager=nodeward-hostmode-test",
			"-f", filepath.Join(repoRoot, "manifests", "crds", "nodeward.io_updatepools.yaml")}
		for _, f := range []string{"namespace.yaml", "serviceaccounts.yaml", "rbac-agent.yaml", "admission-policy.yaml"} {
			args = append(args, "-f", filepath.Join(base, f))
		}
		if out, err := exec.Command(cp.Binary("kubectl"), args...).CombinedOutput(); err != nil {
			clusterSideErr = fmt.Errorf("kubectl apply: %w: %s", err, out)
		}
	})
	return clusterSideErr
}

var (
	clusterSideOnce sync.Once
	clusterSideErr  error
)

// host is one test's node: a kwok Node object in the control plane and a
// container running nodeward from its unit under systemd.
type host struct {
	t      *testing.T
	cp     *cluster.ControlPlane
	prefix string
	name   string
	dir    string
	root   string
	c      *hostmode.Container
	double *rpmostree.Double
	// metrics is the agent's metricsAddress (the container shares the
	// test host's network).
	metrics string
	unit    []byte
	bin     binaries
}

type hostOptions struct {
	// prefix names the node (prefix-0) and its pool; unique per test.
	prefix string
	// args are extra agent flags (in the drop-in).
	args []string
	// tune changes the double before the first boot.
	tune func(*rpmostree.State)
	// directives are further [Service] lines of the agent's drop-in.
	directives []string
	// createNode makes the Node object and returns its name; default a
	// kwok node prefix-0.
	createNode func(cp *cluster.ControlPlane) string
	// prepare changes the root once nodeward is installed, before the
	// first boot.
	prepare func(root string)
}

// newHost creates the node, installs nodeward into a fresh root as
// manifests/host/README.md says (binary, unit enabled, config, a kubeconfig
// with a token bound to the Node) and boots the container: the unit starts
// with the boot.
func newHost(t *testing.T, o hostOptions) *host {
	t.Helper()
	requireHost(t)
	cp := env.ControlPlane(t)
	ctx := context.Background()
	bin, err := build()
	if err != nil {
		t.Fatal(err)
	}
	tarball, err := rootfs()
	if err != nil {
		t.Fatal(err)
	}
	if err := installClusterSide(cp); err != nil {
		t.Fatalf("install the cluster side: %v", err)
	}
	h := &host{t: t, cp: cp, prefix: o.prefix, dir: t.TempDir(), bin: bin}
	if o.createNode == nil {
		o.createNode = func(cp *cluster.ControlPlane) string {
			return cp.CreateNodes(t, cluster.NodeSpec{Prefix: o.prefix, Count: 1})[0]
		}
	}
	h.name = o.createNode(cp)
	h.root = filepath.Join(h.dir, "root")
	start := time.Now()
	if err := hostmode.Extract(ctx, tarball, h.root); err != nil {
		t.Fatal(err)
	}
	logf("%s: root extracted in %s", h.name, time.Since(start).Round(time.Millisecond))
	if h.bin, err = checkBinary(bin, h.root); err != nil {
		t.Fatal(err)
	}
	h.install(o)
	if o.prepare != nil {
		o.prepare(h.root)
	}
	start = time.Now()
	h.c, err = hostmode.Boot(ctx, hostmode.BootOptions{Name: h.name, Root: h.root, LogDir: h.dir, Log: t.Logf})
	if err != nil {
		t.Fatal(err)
	}
	logf("%s: container booted in %s", h.name, time.Since(start).Round(time.Millisecond))
	t.Cleanup(func() {
		if t.Failed() {
			h.dumpLogs()
		}
		if err := h.c.Stop(); err != nil {
			t.Errorf("container %s ended before the test did: %v", h.name, err)
		}
	})
	return h
}

func freePort(t *testing.T) int {
	t.Helper()
	ports, err := cluster.FreePorts(1)
	if err != nil {
		t.Fatal(err)
	}
	return ports[0]
}

// ctx bounds one helper call.
func (h *host) ctx() (context.Context, context.CancelFunc) {
	return context.WithTimeout(context.Background(), 2*time.Minute)
}

// exec runs a command in the container and fails the test on error.
func (h *host) exec(args ...string) string {
	h.t.Helper()
	ctx, cancel := h.ctx()
	defer cancel()
	out, err := h.c.Exec(ctx, args...)
	if err != nil {
		h.t.Fatal(err)
	}
	return out
}

// show returns properties of nodeward.service.
func (h *host) show(props ...string) map[string]string {
	h.t.Helper()
	ctx, cancel := h.ctx()
	defer cancel()
	m, err := h.c.Show(ctx, "nodeward.service", props...)
	if err != nil {
		h.t.Fatal(err)
	}
	return m
}

// journal is the agent's journal of boot ("0" this one, "-1" the one
// before).
func (h *host) journal(boot string) string {
	ctx, cancel := h.ctx()
	defer cancel()
	return h.c.Journal(ctx, "-b", boot, "-u", "nodeward.service", "-o", "short-precise")
}

// bootID is the container's kernel boot ID.
func (h *host) bootID() string {
	h.t.Helper()
	return strings.TrimSpace(h.exec("cat", hostmode.KernelBootIDPath))
}

// waitActive waits until the unit is active (READY=1 received) and returns
// its properties then; a failed unit fails the test at once.
func (h *host) waitActive(timeout time.Duration) map[string]string {
	h.t.Helper()
	var props map[string]string
	h.waitFor(timeout, "nodeward.service active", func() (bool, error) {
		ctx, cancel := h.ctx()
		defer cancel()
		var err error
		props, err = h.c.Show(ctx, "nodeward.service", "ActiveState", "SubState", "NRestarts", "MainPID", "Result",
			"ExecMainStartTimestampMonotonic", "ActiveEnterTimestampMonotonic", "InvocationID", "StatusText")
		if err != nil {
			return false, err
		}
		if props["ActiveState"] == "failed" {
			return false, fmt.Errorf("nodeward.service failed: %v", props)
		}
		return props["ActiveState"] == "active", nil
	})
	return props
}

// waitFor polls cond every 200 ms; an error from cond is remembered, and
// reported with the timeout; a fatal failure is one whose message starts
// with "nodeward.service failed".
func (h *host) waitFor(timeout time.Duration, what string, cond func() (bool, error)) {
	h.t.Helper()
	deadline := time.Now().Add(timeout)
	var last error
	for {
		ok, err := cond()
		if ok {
			return
		}
		if err != nil {
			last = err
			if strings.HasPrefix(err.Error(), "nodeward.service failed") {
				h.t.Fatal(err)
			}
		}
		if time.Now().After(deadline) {
			h.t.Fatalf("%s: not within %s (last error: %v)", what, timeout, last)
		}
		time.Sleep(200 * time.Millisecond)
	}
}

// readyLatency is the time from the agent's start to READY=1, as systemd
// recorded them.
func readyLatency(props map[string]string) time.Duration {
	start, _ := strconv.ParseInt(props["ExecMainStartTimestampMonotonic"], 10, 64)
	ready, _ := strconv.ParseInt(props["ActiveEnterTimestampMonotonic"], 10, 64)
	return time.Duration(ready-start) * time.Microsecond
}

// get fetches path from the agent's metrics address.
func (h *host) get(path string) (int, string, error) {
	client := &http.Client{Timeout: 5 * time.Second}
	resp, err := client.Get("http://" + h.metrics + path)
	if err != nil {
		return 0, "", err
	}
	defer resp.Body.Close()
	body, err := io.ReadAll(resp.Body)
	return resp.StatusCode, string(body), err
}

// metric returns the value of a sample line of /metrics whose name (with
// labels) is exactly series.
func (h *host) metric(series string) (string, error) {
	code, body, err := h.get("/metrics")
	if err != nil {
		return "", err
	}
	if code != http.StatusOK {
		return "", fmt.Errorf("/metrics: %d", code)
	}
	for _, line := range strings.Split(body, "\n") {
		if v, ok := strings.CutPrefix(line, series+" "); ok {
			return v, nil
		}
	}
	return "", fmt.Errorf("no %s in /metrics", series)
}

func (h *host) node() *corev1.Node {
	h.t.Helper()
	n, err := h.cp.Client().CoreV1().Nodes().Get(context.Background(), h.name, metav1.GetOptions{})
	if err != nil {
		h.t.Fatal(err)
	}
	return n
}

// step is the agent's reported update step.
func (h *host) step() (v1alpha1.Step, string, error) {
	n, err := h.cp.Client().CoreV1().Nodes().Get(context.Background(), h.name, metav1.GetOptions{})
	if err != nil {
		return "", "", err
	}
	return v1alpha1.Step(n.Annotations[v1alpha1.AnnotationState]), n.Annotations[v1alpha1.AnnotationReason], nil
}

func (h *host) waitStep(step v1alpha1.Step, timeout time.Duration) {
	h.t.Helper()
	h.waitFor(timeout, fmt.Sprintf("%s in step %s", h.name, step), func() (bool, error) {
		got, reason, err := h.step()
		if err != nil {
			return false, err
		}
		if got == v1alpha1.StepDegraded {
			h.t.Fatalf("%s is Degraded: %s", h.name, reason)
		}
		return got == step, fmt.Errorf("step %s (%s)", got, reason)
	})
}

// recordSteps records every distinct step the node reports until the test
// ends.
func (h *host) recordSteps() func() []v1alpha1.Step {
	var mu sync.Mutex
	var steps []v1alpha1.Step
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan struct{})
	go func() {
		defer close(done)
		for ctx.Err() == nil {
			if s, _, err := h.step(); err == nil && s != "" {
				mu.Lock()
				if len(steps) == 0 || steps[len(steps)-1] != s {
					steps = append(steps, s)
				}
				mu.Unlock()
			}
			select {
			case <-ctx.Done():
			case <-time.After(100 * time.Millisecond):
			}
		}
	}()
	h.t.Cleanup(func() { cancel(); <-done })
	return func() []v1alpha1.Step {
		mu.Lock()
		defer mu.Unlock()
		return append([]v1alpha1.Step(nil), steps...)
	}
}

// updatePool creates the node's UpdatePool (target sim.ProcTarget,
// maxUnavailable 1; paused: staged but no grant until setPaused(false))
// and runs `nodeward coordinator` on the test host for it, until the test
// ends.
func (h *host) updatePool(paused bool) {
	h.t.Helper()
	dyn := h.dynamic()
	one := intstr.FromInt32(1)
	pool := &v1alpha1.UpdatePool{
		ObjectMeta: metav1.ObjectMeta{Name: h.prefix, Labels: map[string]string{poolLabel: h.prefix}},
		Spec: v1alpha1.UpdatePoolSpec{
			NodeSelector:   &metav1.LabelSelector{MatchLabels: map[string]string{cluster.GroupLabel: h.prefix}},
			OSImage:        sim.ProcTarget,
			MaxUnavailable: &one,
			Paused:         paused,
		},
	}
	if err := cluster.CreatePool(context.Background(), dyn, pool); err != nil {
		h.t.Fatal(err)
	}
	h.t.Cleanup(func() {
		_ = dyn.Resource(v1alpha1.UpdatePoolResource()).Delete(context.Background(), h.prefix, metav1.DeleteOptions{})
	})
	logPath := filepath.Join(h.dir, "coordinator.log")
	logFile, err := os.Create(logPath)
	if err != nil {
		h.t.Fatal(err)
	}
	cmd := exec.Command(h.bin.nodeward, "coordinator", "--kubeconfig", h.cp.KubeconfigPath(), "--metrics-address", "",
		"--resync", "1s", "--leader-elect=false", "--pool-selector", poolLabel+"="+h.prefix)
	cmd.Stdout, cmd.Stderr = logFile, logFile
	cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true, Pdeathsig: syscall.SIGKILL}
	if err := cmd.Start(); err != nil {
		h.t.Fatal(err)
	}
	done := make(chan struct{})
	go func() { _ = cmd.Wait(); logFile.Close(); close(done) }()
	h.t.Cleanup(func() {
		_ = syscall.Kill(-cmd.Process.Pid, syscall.SIGTERM)
		select {
		case <-done:
		case <-time.After(10 * time.Second):
			_ = syscall.Kill(-cmd.Process.Pid, syscall.SIGKILL)
			<-done
		}
		if h.t.Failed() {
			data, _ := os.ReadFile(logPath)
			h.t.Logf("coordinator log (tail):\n%s", tailString(string(data), 3000))
		}
	})
}

func (h *host) dynamic() dynamic.Interface {
	h.t.Helper()
	dyn, err := dynamic.NewForConfig(h.cp.Config())
	if err != nil {
		h.t.Fatal(err)
	}
	return dyn
}

// setPaused pauses or resumes the node's UpdatePool.
func (h *host) setPaused(paused bool) {
	h.t.Helper()
	patch := fmt.Appendf(nil, `{"spec":{"paused":%v}}`, paused)
	if _, err := h.dynamic().Resource(v1alpha1.UpdatePoolResource()).Patch(context.Background(), h.prefix,
		types.MergePatchType, patch, metav1.PatchOptions{}); err != nil {
		h.t.Fatal(err)
	}
}

// pinnedPod runs a Deployment's pod on the node behind a PDB that allows
// no eviction: the drain blocks until the returned func deletes the PDB.
func (h *host) pinnedPod() (release func()) {
	h.t.Helper()
	ctx := context.Background()
	ns := h.cp.Namespace(h.t)
	labels := map[string]string{"app": "pinned"}
	d := &appsv1.Deployment{
		ObjectMeta: metav1.ObjectMeta{Name: "pinned", Namespace: ns},
		Spec: appsv1.DeploymentSpec{
			Replicas: ptr.To[int32](1),
			Selector: &metav1.LabelSelector{MatchLabels: labels},
			Template: corev1.PodTemplateSpec{
				ObjectMeta: metav1.ObjectMeta{Labels: labels},
				Spec: corev1.PodSpec{
					NodeSelector:                  map[string]string{"kubernetes.io/hostname": h.name},
					TerminationGracePeriodSeconds: ptr.To[int64](1),
					Containers:                    []corev1.Container{{Name: "app", Image: "registry.invalid/app:1"}},
				},
			},
		},
	}
	if _, err := h.cp.Client().AppsV1().Deployments(ns).Create(ctx, d, metav1.CreateOptions{}); err != nil {
		h.t.Fatal(err)
	}
	pdb := &policyv1.PodDisruptionBudget{
		ObjectMeta: metav1.ObjectMeta{Name: "pinned", Namespace: ns},
		Spec: policyv1.PodDisruptionBudgetSpec{
			MinAvailable: ptr.To(intstr.FromInt32(1)),
			Selector:     &metav1.LabelSelector{MatchLabels: labels},
		},
	}
	if _, err := h.cp.Client().PolicyV1().PodDisruptionBudgets(ns).Create(ctx, pdb, metav1.CreateOptions{}); err != nil {
		h.t.Fatal(err)
	}
	h.waitFor(time.Minute, "the pinned pod running behind its PDB", func() (bool, error) {
		got, err := h.cp.Client().PolicyV1().PodDisruptionBudgets(ns).Get(ctx, "pinned", metav1.GetOptions{})
		return err == nil && got.Status.ObservedGeneration == got.Generation && got.Status.CurrentHealthy == 1, err
	})
	return func() {
		h.t.Helper()
		if err := h.cp.Client().PolicyV1().PodDisruptionBudgets(ns).Delete(ctx, "pinned", metav1.DeleteOptions{}); err != nil {
			h.t.Fatal(err)
		}
	}
}

// dumpLogs logs the agent's journal of every boot and the tail of
// nspawn's log.
func (h *host) dumpLogs() {
	if h.c.Running() {
		ctx, cancel := h.ctx()
		defer cancel()
		h.t.Logf("journal of nodeward.service, all boots (tail):\n%s",
			tailString(h.c.Journal(ctx, "-u", "nodeward.service", "-o", "short-precise"), 8000))
		h.t.Logf("systemctl status:\n%s", func() string {
			out, _ := h.c.Exec(ctx, "systemctl", "status", "--no-pager", "-l", "nodeward.service")
			return out
		}())
	}
	data, _ := os.ReadFile(h.c.LogPath)
	h.t.Logf("systemd-nspawn log (tail):\n%s", tailString(string(data), 3000))
	if s, err := rpmostree.Load(h.double.Dir); err == nil {
		h.t.Logf("double: booted %d of %d deployments, staged %v locked %v, boots %d, calls %v", s.Booted, len(s.Deployments), s.Staged != nil, s.Locked, s.Boots, s.Calls)
	}
}

func tailString(s string, n int) string {
	if len(s) <= n {
		return s
	}
	return "…" + s[len(s)-n:]
}
