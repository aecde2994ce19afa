package conditions

import (
	"context"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"syscall"
	"testing"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/nodeward/nodeward/test/testenv"
)

// startContainerd runs a private containerd (own socket, root and state
// directories, native snapshotter) and returns its socket and a stop
// function that waits for the process to exit.
func startContainerd(t *testing.T, dir string) (socket string, stop func()) {
	t.Helper()
	bin := testenv.RequireBinary(t, "containerd")
	socket = filepath.Join(dir, "c.sock")
	config := fmt.Sprintf(`version = 2
root = %[1]q
state = %[2]q
disabled_plugins = ["io.containerd.snapshotter.v1.btrfs", "io.containerd.snapshotter.v1.zfs", "io.containerd.snapshotter.v1.aufs", "io.containerd.snapshotter.v1.devmapper"]
[grpc]
  address = %[3]q
[ttrpc]
  address = %[4]q
[plugins."io.containerd.grpc.v1.cri"]
  [plugins."io.containerd.grpc.v1.cri".containerd]
    snapshotter = "native"
  [plugins."io.containerd.grpc.v1.cri".cni]
    conf_dir = %[5]q
`, filepath.Join(dir, "root"), filepath.Join(dir, "state"), socket, socket+".ttrpc", filepath.Join(dir, "cni"))
	configPath := filepath.Join(dir, "config.toml")
	if err := os.WriteFile(configPath, []byte(config), 0o600); err != nil {
		t.Fatal(err)
	}
	logFile, err := os.Create(filepath.Join(dir, "containerd.log"))
	if err != nil {
		t.Fatal(err)
	}
	cmd := exec.Command(bin, "--config", configPath)
	cmd.Stdout, cmd.Stderr = logFile, logFile
	if err := cmd.Start(); err != nil {
		t.Fatalf("start containerd: %v", err)
	}
	exited := make(chan struct{})
	go func() { cmd.Wait(); logFile.Close(); close(exited) }()
	stopped := false
	stop = func() {
		if stopped {
			return
		}
		stopped = true
		cmd.Process.Signal(syscall.SIGTERM)
		select {
		case <-exited:
		case <-time.After(10 * time.Second):
			cmd.Process.Kill()
			<-exited
		}
	}
	t.Cleanup(stop)
	return socket, stop
}

// TestRuntimeProbeWithRealContainerd: containerd answering CRI Status is
// healthy; stopped, the runtime is unavailable; started again, healthy.
func TestRuntimeProbeWithRealContainerd(t *testing.T) {
	t.Parallel()
	testenv.RequireRoot(t)
	dir, err := os.MkdirTemp("", "nwctrd") // short: socket paths are limited to 108 bytes
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { os.RemoveAll(dir) })
	socket, stop := startContainerd(t, dir)
	cfg := RuntimeConfig{Enabled: true, Endpoint: "unix://" + socket,
		Timeout: metav1.Duration{Duration: time.Second}, PollInterval: metav1.Duration{Duration: time.Second}}
	probe := NewRuntimeProbe(cfg, nil)
	waitHealth(t, probe, Healthy, 20*time.Second)
	s := probe.Sample(context.Background())
	if s.Reason != "RuntimeReady" {
		t.Errorf("running containerd: reason %q (%s)", s.Reason, s.Message)
	}
	stop()
	s = waitHealth(t, probe, Unhealthy, 10*time.Second)
	if s.Reason != "RuntimeUnreachable" {
		t.Errorf("stopped containerd: reason %q (%s)", s.Reason, s.Message)
	}
	startContainerd(t, dir)
	waitHealth(t, probe, Healthy, 20*time.Second)

	never := NewRuntimeProbe(RuntimeConfig{Endpoint: filepath.Join(dir, "none.sock"),
		Timeout: metav1.Duration{Duration: time.Second}}, nil)
	if s := never.Sample(context.Background()); s.Health != Unknown || s.Reason != "NoRuntimeSocket" {
		t.Errorf("socket never seen: %v %s, want Unknown NoRuntimeSocket", s.Health, s.Reason)
	}
}

func waitHealth(t *testing.T, p Probe, want Health, timeout time.Duration) Signal {
	t.Helper()
	deadline := time.Now().Add(timeout)
	for {
		s := p.Sample(context.Background())
		if s.Health == want {
			return s
		}
		if time.Now().After(deadline) {
			t.Fatalf("%s still %v (%s: %s) after %v, want %v", p.Name(), s.Health, s.Reason, s.Message, timeout, want)
		}
		time.Sleep(100 * time.Millisecond)
	}
}
