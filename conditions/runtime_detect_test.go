package conditions

import (
	"context"
	"os"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/nodeward/nodeward/test/testenv"
)

// detectConfig leaves the endpoint empty: found as crictl finds it.
func detectConfig() RuntimeConfig {
	return RuntimeConfig{Enabled: true, Timeout: metav1.Duration{Duration: 2 * time.Second},
		PollInterval: metav1.Duration{Duration: 200 * time.Millisecond}}
}

// shortTemp is a temporary directory with a short path: socket paths are
// limited to 108 bytes.
func shortTemp(t *testing.T, pattern string) string {
	t.Helper()
	dir, err := os.MkdirTemp("", pattern)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { os.RemoveAll(dir) })
	return dir
}

// TestRuntimeDetection: with no endpoint configured, nothing present is
// Unknown naming every candidate; a runtime started later is found at the
// next sample; the first candidate in crictl's order wins, and a runtime
// found stays the one asked; a configured endpoint overrides detection.
func TestRuntimeDetection(t *testing.T) {
	t.Parallel()
	root := shortTemp(t, "nwdet")
	p := NewRuntimeProbe(detectConfig(), &Env{RuntimeRoot: root})

	s := p.Sample(context.Background())
	if s.Verdict != Unknown || s.Reason != "NoRuntimeSocket" {
		t.Fatalf("no runtime: %v %s (%s), want Unknown NoRuntimeSocket", s.Verdict, s.Reason, s.Message)
	}
	for _, c := range RuntimeEndpointCandidates() {
		if want := filepath.Join(root, strings.TrimPrefix(c, "unix://")); !strings.Contains(s.Message, want) {
			t.Errorf("no runtime: message %q does not name candidate %s", s.Message, want)
		}
	}
	if got := p.Endpoint(); got != "" {
		t.Errorf("no runtime: Endpoint() = %q, want empty", got)
	}

	// A stale socket file of a runtime that is not running is no runtime.
	stale := filepath.Join(root, "run/containerd/containerd.sock")
	if err := os.MkdirAll(filepath.Dir(stale), 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(stale, nil, 0o600); err != nil {
		t.Fatal(err)
	}
	if s := p.Sample(context.Background()); s.Verdict != Unknown || s.Reason != "RuntimeUnreachable" {
		t.Errorf("stale containerd socket only: %v %s (%s), want Unknown RuntimeUnreachable", s.Verdict, s.Reason, s.Message)
	}

	// CRI-O starts after the agent: found at the next sample.
	crio := &fakeRuntime{}
	crio.ready.Store(true)
	crioSocket := filepath.Join(root, "run/crio/crio.sock")
	serveFakeRuntime(t, crioSocket, crio, false)
	s = p.Sample(context.Background())
	if s.Verdict != Healthy || !strings.Contains(s.Message, "unix://"+crioSocket) {
		t.Fatalf("CRI-O started: %v %s (%s), want Healthy on %s", s.Verdict, s.Reason, s.Message, crioSocket)
	}
	if got := p.Endpoint(); got != "unix://"+crioSocket {
		t.Errorf("CRI-O started: Endpoint() = %q, want unix://%s", got, crioSocket)
	}

	// containerd comes up too (earlier in crictl's order): the runtime
	// found stays the one asked, and its failure is what is reported.
	os.Remove(stale)
	ctrd := &fakeRuntime{}
	ctrd.ready.Store(true)
	serveFakeRuntime(t, stale, ctrd, true)
	crio.ready.Store(false)
	s = p.Sample(context.Background())
	if s.Verdict != Unhealthy || s.Reason != "RuntimeNotReady" || !strings.Contains(s.Message, crioSocket) {
		t.Errorf("CRI-O not ready, containerd ready: %v %s (%s), want Unhealthy RuntimeNotReady on CRI-O", s.Verdict, s.Reason, s.Message)
	}

	// A fresh probe on the same host takes crictl's first: containerd.
	fresh := NewRuntimeProbe(detectConfig(), &Env{RuntimeRoot: root})
	if s := fresh.Sample(context.Background()); s.Verdict != Healthy || !strings.Contains(s.Message, "unix://"+stale) {
		t.Errorf("both runtimes: %v %s (%s), want Healthy on containerd's %s", s.Verdict, s.Reason, s.Message, stale)
	}

	// A configured endpoint is the only one asked.
	cfg := detectConfig()
	cfg.Endpoint = "unix://" + filepath.Join(root, "none.sock")
	explicit := NewRuntimeProbe(cfg, &Env{RuntimeRoot: root})
	if s := explicit.Sample(context.Background()); s.Verdict != Unknown || s.Reason != "NoRuntimeSocket" {
		t.Errorf("configured endpoint absent: %v %s (%s), want Unknown NoRuntimeSocket", s.Verdict, s.Reason, s.Message)
	}
}

// TestRuntimeConfigEndpoint: empty is detection and valid; a relative
// endpoint is refused naming the field and the value.
func TestRuntimeConfigEndpoint(t *testing.T) {
	t.Parallel()
	cfg := DefaultConfig()
	if cfg.Runtime.Endpoint != "" {
		t.Errorf("default endpoint %q, want empty (detected)", cfg.Runtime.Endpoint)
	}
	if err := cfg.Validate(); err != nil {
		t.Errorf("default config: %v", err)
	}
	cfg.Runtime.Endpoint = "run/crio/crio.sock"
	err := cfg.Validate()
	if err == nil || !strings.Contains(err.Error(), "runtime.endpoint") || !strings.Contains(err.Error(), "run/crio/crio.sock") {
		t.Errorf("relative endpoint: error %v, want one naming runtime.endpoint and the value", err)
	}
}

// TestRuntimeRestartInMountedDirectory is the DaemonSet's view of a
// containerd restart: the host's /run/containerd is bind-mounted (a
// directory hostPath) into the "pod" root where the probe detects it. A
// crash turns the condition True; containerd started again on the same
// path makes a new socket inode, which the directory mount shows, and the
// condition clears. A bind mount of the socket FILE (the old manifests)
// keeps the dead inode and stays unreachable: the reason for the change.
func TestRuntimeRestartInMountedDirectory(t *testing.T) {
	t.Parallel()
	testenv.RequireRoot(t)
	dir := shortTemp(t, "nwmnt")
	hostRun := filepath.Join(dir, "h", "run", "containerd")
	podRoot := filepath.Join(dir, "p")
	podRun := filepath.Join(podRoot, "run", "containerd")
	for _, d := range []string{hostRun, podRun} {
		if err := os.MkdirAll(d, 0o755); err != nil {
			t.Fatal(err)
		}
	}
	bindMount(t, hostRun, podRun)
	socket := filepath.Join(hostRun, "containerd.sock")
	end := startContainerdAt(t, filepath.Join(dir, "c1"), socket)

	// The socket file mounted on its own, as hostPath type Socket did.
	fileMount := filepath.Join(dir, "file.sock")
	waitFile(t, socket, 20*time.Second)
	if err := os.WriteFile(fileMount, nil, 0o600); err != nil {
		t.Fatal(err)
	}
	bindMount(t, socket, fileMount)

	probe := NewRuntimeProbe(detectConfig(), &Env{RuntimeRoot: podRoot})
	mon := NewMonitor(MonitorConfig{Probes: []Probe{probe},
		Hysteresis: HysteresisConfig{BadSamples: 1, QuietPeriod: metav1.Duration{Duration: 500 * time.Millisecond}}})
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan struct{})
	go func() { mon.Run(ctx); close(done) }()
	t.Cleanup(func() { cancel(); <-done })

	c := waitCondition(t, mon, corev1.ConditionFalse, 20*time.Second)
	if want := "unix://" + filepath.Join(podRun, "containerd.sock"); !strings.Contains(c.Message, want) {
		t.Errorf("running: message %q does not name the endpoint %s", c.Message, want)
	}
	if got := probe.Endpoint(); got != "unix://"+filepath.Join(podRun, "containerd.sock") {
		t.Errorf("Endpoint() = %q", got)
	}
	fileProbe := NewRuntimeProbe(RuntimeConfig{Enabled: true, Endpoint: "unix://" + fileMount,
		Timeout: metav1.Duration{Duration: time.Second}}, nil)
	waitHealth(t, fileProbe, Healthy, 10*time.Second)

	end(syscall.SIGKILL)
	c = waitCondition(t, mon, corev1.ConditionTrue, 10*time.Second)
	if c.Reason != "RuntimeUnreachable" {
		t.Errorf("containerd killed: reason %q (%s), want RuntimeUnreachable", c.Reason, c.Message)
	}

	startContainerdAt(t, filepath.Join(dir, "c1"), socket)
	waitCondition(t, mon, corev1.ConditionFalse, 30*time.Second)
	if s := fileProbe.Sample(context.Background()); s.Verdict != Unhealthy {
		t.Errorf("socket file mount after the restart: %v %s (%s), want Unhealthy (the dead inode)", s.Verdict, s.Reason, s.Message)
	}
}

func bindMount(t *testing.T, source, target string) {
	t.Helper()
	if err := syscall.Mount(source, target, "", syscall.MS_BIND, ""); err != nil {
		t.Fatalf("bind mount %s on %s: %v", source, target, err)
	}
	t.Cleanup(func() {
		if err := syscall.Unmount(target, syscall.MNT_DETACH); err != nil {
			t.Errorf("unmount %s: %v", target, err)
		}
	})
}

func waitFile(t *testing.T, path string, timeout time.Duration) {
	t.Helper()
	deadline := time.Now().Add(timeout)
	for {
		if _, err := os.Stat(path); err == nil {
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("%s did not appear within %v", path, timeout)
		}
		time.Sleep(50 * time.Millisecond)
	}
}

// waitCondition waits until the monitor's only condition has status want.
func waitCondition(t *testing.T, mon *Monitor, want corev1.ConditionStatus, timeout time.Duration) Condition {
	t.Helper()
	deadline := time.Now().Add(timeout)
	for {
		c := mon.Conditions()[0]
		if c.Status == want {
			return c
		}
		if time.Now().After(deadline) {
			t.Fatalf("runtime condition %s (%s: %s) after %v, want %s", c.Status, c.Reason, c.Message, timeout, want)
		}
		select {
		case <-mon.Changes():
		case <-time.After(100 * time.Millisecond):
		}
	}
}
