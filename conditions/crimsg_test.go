package conditions

import (
	"context"
	"errors"
	"net"
	"path/filepath"
	"slices"
	"sync"
	"testing"
	"time"

	"google.golang.org/grpc"
	healthpb "google.golang.org/grpc/health/grpc_health_v1"
	"google.golang.org/grpc/metadata"
	"google.golang.org/protobuf/encoding/protowire"
	"google.golang.org/protobuf/proto"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	runtimeapi "k8s.io/cri-api/pkg/apis/runtime/v1"
)

// The hand-written decoders read what the generated CRI and health types
// encode.
func TestCRIMessagesDecodeWhatTheGeneratedTypesEncode(t *testing.T) {
	status, err := proto.Marshal(&runtimeapi.StatusResponse{
		Status: &runtimeapi.RuntimeStatus{Conditions: []*runtimeapi.RuntimeCondition{
			{Type: runtimeapi.RuntimeReady, Status: true},
			{Type: runtimeapi.NetworkReady, Status: false, Reason: "NetworkPluginNotReady", Message: "cni config uninitialized"},
		}},
		Info: map[string]string{"config": "{}"},
	})
	if err != nil {
		t.Fatal(err)
	}
	conds, err := decodeCRIStatus(status)
	want := []criCondition{
		{Type: criRuntimeReady, Status: true},
		{Type: criNetworkReady, Reason: "NetworkPluginNotReady", Message: "cni config uninitialized"},
	}
	if err != nil || !slices.Equal(conds, want) {
		t.Fatalf("decodeCRIStatus = %+v, %v; want %+v", conds, err, want)
	}
	version, err := proto.Marshal(&runtimeapi.VersionResponse{Version: "0.1.0", RuntimeName: "cri-o", RuntimeVersion: "1.31.0", RuntimeApiVersion: "v1"})
	if err != nil {
		t.Fatal(err)
	}
	if v, err := decodeCRIVersion(version); err != nil || v != (criVersion{RuntimeName: "cri-o", RuntimeVersion: "1.31.0", RuntimeAPIVersion: "v1"}) {
		t.Fatalf("decodeCRIVersion = %+v, %v", v, err)
	}
	for _, s := range []healthpb.HealthCheckResponse_ServingStatus{healthpb.HealthCheckResponse_UNKNOWN,
		healthpb.HealthCheckResponse_SERVING, healthpb.HealthCheckResponse_NOT_SERVING, healthpb.HealthCheckResponse_SERVICE_UNKNOWN} {
		b, err := proto.Marshal(&healthpb.HealthCheckResponse{Status: s})
		if err != nil {
			t.Fatal(err)
		}
		got, err := decodeHealth(b)
		if err != nil || got != uint64(s) || healthStatusName(got) != s.String() {
			t.Errorf("decodeHealth(%s) = %d (%s), %v", s, got, healthStatusName(got), err)
		}
	}
}

// A truncated or mistyped answer is an error, never a panic or a guess.
func TestCRIMessagesRefuseBadWire(t *testing.T) {
	good, _ := proto.Marshal(&runtimeapi.StatusResponse{Status: &runtimeapi.RuntimeStatus{
		Conditions: []*runtimeapi.RuntimeCondition{{Type: runtimeapi.RuntimeReady, Status: true}}}})
	if _, err := decodeCRIStatus(good[:len(good)-1]); err == nil {
		t.Error("truncated StatusResponse decoded")
	}
	// status = 1 sent as a varint
	if _, err := decodeCRIStatus(protowire.AppendVarint(protowire.AppendTag(nil, 1, protowire.VarintType), 1)); !errors.Is(err, errWireType) {
		t.Errorf("StatusResponse with a varint status: %v, want a wire type error", err)
	}
	// Status = 1 sent as a string
	if _, err := decodeHealth(protowire.AppendString(protowire.AppendTag(nil, 1, protowire.BytesType), "SERVING")); !errors.Is(err, errWireType) {
		t.Errorf("HealthCheckResponse with a string status: %v, want a wire type error", err)
	}
}

// FuzzDecodeCRIStatus: on any input the decoder ends without a panic, and
// where the generated type decodes the input as well, both read the same
// conditions.
func FuzzDecodeCRIStatus(f *testing.F) {
	seed, _ := proto.Marshal(&runtimeapi.StatusResponse{Status: &runtimeapi.RuntimeStatus{
		Conditions: []*runtimeapi.RuntimeCondition{{Type: runtimeapi.RuntimeReady, Status: true, Reason: "r", Message: "m"}}}})
	f.Add(seed)
	f.Add([]byte{})
	f.Fuzz(func(t *testing.T, b []byte) {
		conds, err := decodeCRIStatus(b)
		var generated runtimeapi.StatusResponse
		if gerr := proto.Unmarshal(b, &generated); gerr != nil || err != nil {
			return
		}
		var want []criCondition
		for _, c := range generated.GetStatus().GetConditions() {
			want = append(want, criCondition{Type: c.Type, Status: c.Status, Reason: c.Reason, Message: c.Message})
		}
		if !slices.Equal(conds, want) {
			t.Fatalf("decoded %+v, the generated type %+v", conds, want)
		}
	})
}

// TestCRICallsCarryPlainGRPCContentType: every call the probe makes says
// content-type "application/grpc" exactly, as generated clients do. CRI-O
// routes its socket's connections by that exact header (cmux) and closes
// any other: with "application/grpc+proto" the probe never read a real
// CRI-O (test/node's TestCRIONodeAgentRuntime runs against one).
func TestCRICallsCarryPlainGRPCContentType(t *testing.T) {
	var mu sync.Mutex
	seen := map[string][]string{}
	record := func(ctx context.Context, req any, info *grpc.UnaryServerInfo, handler grpc.UnaryHandler) (any, error) {
		md, _ := metadata.FromIncomingContext(ctx)
		mu.Lock()
		seen[info.FullMethod] = md.Get("content-type")
		mu.Unlock()
		return handler(ctx, req)
	}
	dir := t.TempDir()
	l, err := net.Listen("unix", filepath.Join(dir, "crio.sock"))
	if err != nil {
		t.Fatal(err)
	}
	rt := &fakeRuntime{}
	rt.ready.Store(true)
	srv := grpc.NewServer(grpc.UnaryInterceptor(record))
	runtimeapi.RegisterRuntimeServiceServer(srv, rt)
	go srv.Serve(l)
	defer srv.Stop()

	p := NewRuntimeProbe(RuntimeConfig{Enabled: true, Endpoint: "unix://" + filepath.Join(dir, "crio.sock"),
		Timeout: metav1.Duration{Duration: 2 * time.Second}, PollInterval: metav1.Duration{Duration: time.Second}}, nil)
	if s := p.Sample(context.Background()); s.Verdict != Healthy {
		t.Fatalf("sample: %v %s (%s)", s.Verdict, s.Reason, s.Message)
	}
	mu.Lock()
	defer mu.Unlock()
	for _, method := range []string{criStatusMethod, criVersionMethod} {
		if got := seen[method]; !slices.Equal(got, []string{"application/grpc"}) {
			t.Errorf("%s: content-type %q, want exactly application/grpc", method, got)
		}
	}
}
