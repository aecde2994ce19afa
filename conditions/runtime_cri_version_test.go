package conditions

import (
	"context"
	"net"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	grpchealth "google.golang.org/grpc/health"
	healthpb "google.golang.org/grpc/health/grpc_health_v1"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/types/known/emptypb"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	runtimeapi "k8s.io/cri-api/pkg/apis/runtime/v1"
)

// olderRuntime answers runtime.v1's Status as fakeRuntime does; its
// Version reports apiVersion, or is Unimplemented when unimplemented.
type olderRuntime struct {
	fakeRuntime
	apiVersion    string
	unimplemented bool
}

func (o *olderRuntime) Version(context.Context, *runtimeapi.VersionRequest) (*runtimeapi.VersionResponse, error) {
	if o.unimplemented {
		return nil, status.Error(codes.Unimplemented, "method Version not implemented")
	}
	return &runtimeapi.VersionResponse{RuntimeName: "old", RuntimeVersion: "0.9", RuntimeApiVersion: o.apiVersion}, nil
}

// v1alpha2ServiceDesc is a runtime of the older CRI: runtime.v1alpha2's
// Version only (its VersionResponse has runtime.v1's fields), no
// runtime.v1 at all.
var v1alpha2ServiceDesc = grpc.ServiceDesc{
	ServiceName: "runtime.v1alpha2.RuntimeService",
	HandlerType: (*any)(nil),
	Methods: []grpc.MethodDesc{{MethodName: "Version",
		Handler: func(_ any, _ context.Context, dec func(any) error, _ grpc.UnaryServerInterceptor) (any, error) {
			if err := dec(&emptypb.Empty{}); err != nil {
				return nil, err
			}
			return &runtimeapi.VersionResponse{Version: "0.1.0", RuntimeName: "legacy-runtime", RuntimeVersion: "1.4.0", RuntimeApiVersion: "v1alpha2"}, nil
		}}},
}

// serveOn serves what register registers on socket; stop ends it (and
// removes the socket, as a stopped runtime may leave it or not).
func serveOn(t *testing.T, socket string, register func(*grpc.Server)) (stop func()) {
	t.Helper()
	l, err := net.Listen("unix", socket)
	if err != nil {
		t.Fatal(err)
	}
	srv := grpc.NewServer()
	register(srv)
	go srv.Serve(l)
	t.Cleanup(srv.Stop)
	return srv.Stop
}

// TestRuntimeProbeOlderCRI: a runtime that answers, but not with the CRI
// the probe reads, is reported as such and never taken for down.
//   - A runtime.v1 runtime that is healthy, replaced on its socket by one
//     speaking only CRI v1alpha2: Unknown CRIVersionUnsupported (not
//     Unhealthy, though the probe had seen a runtime there), the message
//     naming the runtime and its CRI version;
//   - a gRPC server with no CRI at all: Unknown, saying so;
//   - a runtime.v1 runtime whose Version reports an older CRI, or answers
//     Version Unimplemented: Healthy (its Status is read), the message
//     noting it.
func TestRuntimeProbeOlderCRI(t *testing.T) {
	t.Parallel()
	dir, err := os.MkdirTemp("", "nwcri")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { os.RemoveAll(dir) })
	socket := filepath.Join(dir, "r.sock")
	cfg := RuntimeConfig{Enabled: true, Endpoint: "unix://" + socket,
		Timeout: metav1.Duration{Duration: 2 * time.Second}, PollInterval: metav1.Duration{Duration: time.Second}}
	p := NewRuntimeProbe(cfg, nil)

	current := &fakeRuntime{}
	current.ready.Store(true)
	stop := serveOn(t, socket, func(s *grpc.Server) { runtimeapi.RegisterRuntimeServiceServer(s, current) })
	if s := p.Sample(context.Background()); s.Verdict != Healthy {
		t.Fatalf("runtime.v1 runtime: %v %s (%s), want Healthy", s.Verdict, s.Reason, s.Message)
	}
	stop()
	os.Remove(socket)
	stop = serveOn(t, socket, func(s *grpc.Server) { s.RegisterService(&v1alpha2ServiceDesc, struct{}{}) })
	for range 2 { // the second sample too: no hysteresis turns it into down
		s := p.Sample(context.Background())
		if s.Verdict != Unknown || s.Reason != "CRIVersionUnsupported" {
			t.Fatalf("v1alpha2-only runtime: %v %s (%s), want Unknown CRIVersionUnsupported", s.Verdict, s.Reason, s.Message)
		}
		if !strings.Contains(s.Message, "legacy-runtime 1.4.0") || !strings.Contains(s.Message, "CRI v1alpha2") {
			t.Errorf("v1alpha2-only runtime: message %q does not name the runtime and its CRI", s.Message)
		}
	}
	stop()
	os.Remove(socket)
	serveOn(t, socket, func(s *grpc.Server) { healthpb.RegisterHealthServer(s, grpchealth.NewServer()) })
	if s := p.Sample(context.Background()); s.Verdict != Unknown || !strings.Contains(s.Message, "not CRI runtime.v1 Status") {
		t.Errorf("no CRI at all: %v %s (%s), want Unknown saying it lacks runtime.v1 Status", s.Verdict, s.Reason, s.Message)
	}

	for _, c := range []struct {
		rt   *olderRuntime
		note string
	}{
		{&olderRuntime{apiVersion: "v1alpha2"}, "old 0.9 on unix://" + socket + " is ready (reports CRI v1alpha2, older than v1)"},
		{&olderRuntime{unimplemented: true}, "container runtime on unix://" + socket + " is ready (CRI Version: Unimplemented)"},
	} {
		c.rt.ready.Store(true)
		endpoint, _ := serveFakeRuntimeAs(t, c.rt)
		p := NewRuntimeProbe(RuntimeConfig{Enabled: true, Endpoint: endpoint, Timeout: cfg.Timeout, PollInterval: cfg.PollInterval}, nil)
		s := p.Sample(context.Background())
		want := strings.Replace(c.note, "unix://"+socket, endpoint, 1)
		if s.Verdict != Healthy || s.Message != want {
			t.Errorf("runtime.v1 Status, Version %+v: %v %s %q, want Healthy %q", c.rt, s.Verdict, s.Reason, s.Message, want)
		}
	}
}

// serveFakeRuntimeAs serves rt's runtime.v1 service on a socket of its own.
func serveFakeRuntimeAs(t *testing.T, rt runtimeapi.RuntimeServiceServer) (endpoint string, stop func()) {
	t.Helper()
	dir, err := os.MkdirTemp("", "nwcri")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { os.RemoveAll(dir) })
	socket := filepath.Join(dir, "r.sock")
	return "unix://" + socket, serveOn(t, socket, func(s *grpc.Server) { runtimeapi.RegisterRuntimeServiceServer(s, rt) })
}
