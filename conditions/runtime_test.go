package conditions

import (
	"context"
	"fmt"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials/insecure"
	grpchealth "google.golang.org/grpc/health"
	healthpb "google.golang.org/grpc/health/grpc_health_v1"
	"google.golang.org/protobuf/types/known/emptypb"
	"google.golang.org/protobuf/types/known/wrapperspb"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	runtimeapi "k8s.io/cri-api/pkg/apis/runtime/v1"

	"github.com/nodeward/nodeward/test/testenv"
)

// startContainerd runs a private containerd (own socket, root and state
// directories, native snapshotter) and returns its socket and a stop
// function that waits for the process to exit.
func startContainerd(t *testing.T, dir string) (socket string, stop func()) {
	t.Helper()
	socket = filepath.Join(dir, "c.sock")
	end := startContainerdAt(t, dir, socket)
	return socket, func() { end(syscall.SIGTERM) }
}

// startContainerdAt runs a private containerd listening on socket, its
// root, state and config under dir; end sends sig (SIGKILL: a crash) and
// waits for the exit, killing after 10s.
func startContainerdAt(t *testing.T, dir, socket string) (end func(sig syscall.Signal)) {
	t.Helper()
	bin := testenv.RequireBinary(t, "containerd")
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
	if err := os.MkdirAll(dir, 0o700); err != nil {
		t.Fatal(err)
	}
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
	end = func(sig syscall.Signal) {
		if stopped {
			return
		}
		stopped = true
		cmd.Process.Signal(sig)
		select {
		case <-exited:
		case <-time.After(10 * time.Second):
			cmd.Process.Kill()
			<-exited
		}
	}
	t.Cleanup(func() { end(syscall.SIGTERM) })
	return end
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
	// The CRI Version answer, decoded by hand (crimsg.go), names the runtime.
	if !strings.HasPrefix(s.Message, "containerd 1.") {
		t.Errorf("running containerd: message %q, want it to start with the runtime's name and version", s.Message)
	}
	assertContainerd(t, "unix://"+socket, true)
	stop()
	s = waitHealth(t, probe, Unhealthy, 10*time.Second)
	if s.Reason != "RuntimeUnreachable" {
		t.Errorf("stopped containerd: reason %q (%s)", s.Reason, s.Message)
	}
	startContainerd(t, dir)
	waitHealth(t, probe, Healthy, 20*time.Second)

	never := NewRuntimeProbe(RuntimeConfig{Endpoint: filepath.Join(dir, "none.sock"),
		Timeout: metav1.Duration{Duration: time.Second}}, nil)
	if s := never.Sample(context.Background()); s.Verdict != Unknown || s.Reason != "NoRuntimeSocket" {
		t.Errorf("socket never seen: %v %s, want Unknown NoRuntimeSocket", s.Verdict, s.Reason)
	}
}

// assertContainerd checks that the socket is, or is not, recognized as
// containerd's, so that the health check is not silently skipped.
func assertContainerd(t *testing.T, endpoint string, want bool) {
	t.Helper()
	conn, err := grpc.NewClient(endpoint, grpc.WithTransportCredentials(insecure.NewCredentials()))
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close()
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	got, err := isContainerd(ctx, conn)
	if err != nil || got != want {
		t.Errorf("isContainerd(%s) = %v, %v; want %v", endpoint, got, err, want)
	}
}

func waitHealth(t *testing.T, p Probe, want Verdict, timeout time.Duration) Signal {
	t.Helper()
	deadline := time.Now().Add(timeout)
	for {
		s := p.Sample(context.Background())
		if s.Verdict == want {
			return s
		}
		if time.Now().After(deadline) {
			t.Fatalf("%s still %v (%s: %s) after %v, want %v", p.Name(), s.Verdict, s.Reason, s.Message, timeout, want)
		}
		time.Sleep(100 * time.Millisecond)
	}
}

// fakeRuntime serves CRI Status and Version; startFakeRuntime adds, for a
// containerd stand-in, containerd's version service and the gRPC health
// service as containerd does.
type fakeRuntime struct {
	runtimeapi.UnimplementedRuntimeServiceServer
	ready atomic.Bool
}

func (f *fakeRuntime) Status(context.Context, *runtimeapi.StatusRequest) (*runtimeapi.StatusResponse, error) {
	return &runtimeapi.StatusResponse{Status: &runtimeapi.RuntimeStatus{Conditions: []*runtimeapi.RuntimeCondition{
		{Type: runtimeapi.RuntimeReady, Status: f.ready.Load()},
		{Type: runtimeapi.NetworkReady, Status: true},
	}}}, nil
}

func (f *fakeRuntime) Version(context.Context, *runtimeapi.VersionRequest) (*runtimeapi.VersionResponse, error) {
	return &runtimeapi.VersionResponse{RuntimeName: "fake", RuntimeVersion: "1.0"}, nil
}

// versionServiceDesc stands in for containerd's version service: any reply
// with a body proves the service is there.
var versionServiceDesc = grpc.ServiceDesc{
	ServiceName: "containerd.services.version.v1.Version",
	HandlerType: (*any)(nil),
	Methods: []grpc.MethodDesc{{MethodName: "Version",
		Handler: func(_ any, _ context.Context, dec func(any) error, _ grpc.UnaryServerInterceptor) (any, error) {
			if err := dec(&emptypb.Empty{}); err != nil {
				return nil, err
			}
			// A non-empty reply, as containerd's (version, revision).
			return wrapperspb.String("1.7.0"), nil
		}}},
}

func startFakeRuntime(t *testing.T, rt *fakeRuntime, containerd bool) (endpoint string, health *grpchealth.Server) {
	t.Helper()
	dir, err := os.MkdirTemp("", "nwfake")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { os.RemoveAll(dir) })
	return serveFakeRuntime(t, filepath.Join(dir, "r.sock"), rt, containerd)
}

// serveFakeRuntime serves rt on socket until the test ends.
func serveFakeRuntime(t *testing.T, socket string, rt *fakeRuntime, containerd bool) (endpoint string, health *grpchealth.Server) {
	t.Helper()
	if err := os.MkdirAll(filepath.Dir(socket), 0o755); err != nil {
		t.Fatal(err)
	}
	l, err := net.Listen("unix", socket)
	if err != nil {
		t.Fatal(err)
	}
	srv := grpc.NewServer()
	runtimeapi.RegisterRuntimeServiceServer(srv, rt)
	if containerd {
		srv.RegisterService(&versionServiceDesc, struct{}{})
		health = grpchealth.NewServer()
		healthpb.RegisterHealthServer(srv, health)
	}
	go srv.Serve(l)
	t.Cleanup(srv.Stop)
	return "unix://" + socket, health
}

// TestRuntimeProbeFakeRuntimes: a CRI-only runtime is judged by CRI Status
// alone; a containerd socket also by its health service.
func TestRuntimeProbeFakeRuntimes(t *testing.T) {
	t.Parallel()
	cfg := func(endpoint string) RuntimeConfig {
		return RuntimeConfig{Enabled: true, Endpoint: endpoint,
			Timeout: metav1.Duration{Duration: 2 * time.Second}, PollInterval: metav1.Duration{Duration: time.Second}}
	}

	crio := &fakeRuntime{}
	crio.ready.Store(true)
	endpoint, _ := startFakeRuntime(t, crio, false)
	assertContainerd(t, endpoint, false)
	p := NewRuntimeProbe(cfg(endpoint), nil)
	if s := p.Sample(context.Background()); s.Verdict != Healthy || s.Reason != "RuntimeReady" {
		t.Errorf("CRI-only runtime, ready: %v %s (%s), want Healthy RuntimeReady", s.Verdict, s.Reason, s.Message)
	}
	crio.ready.Store(false)
	if s := p.Sample(context.Background()); s.Verdict != Unhealthy || s.Reason != "RuntimeNotReady" {
		t.Errorf("CRI-only runtime, not ready: %v %s (%s), want Unhealthy RuntimeNotReady", s.Verdict, s.Reason, s.Message)
	}

	ctrd := &fakeRuntime{}
	ctrd.ready.Store(true)
	endpoint, health := startFakeRuntime(t, ctrd, true)
	assertContainerd(t, endpoint, true)
	p = NewRuntimeProbe(cfg(endpoint), nil)
	if s := p.Sample(context.Background()); s.Verdict != Healthy || s.Reason != "RuntimeReady" {
		t.Errorf("containerd, serving: %v %s (%s), want Healthy RuntimeReady", s.Verdict, s.Reason, s.Message)
	}
	health.SetServingStatus("", healthpb.HealthCheckResponse_NOT_SERVING)
	s := p.Sample(context.Background())
	if s.Verdict != Unhealthy || s.Reason != "ContainerdNotServing" {
		t.Errorf("containerd, not serving: %v %s (%s), want Unhealthy ContainerdNotServing", s.Verdict, s.Reason, s.Message)
	}
	if !strings.Contains(s.Message, "NOT_SERVING") {
		t.Errorf("containerd, not serving: message %q does not name the status", s.Message)
	}
}
