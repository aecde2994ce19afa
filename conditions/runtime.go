package conditions

import (
	"context"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"strings"
	"sync"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/credentials/insecure"
	healthpb "google.golang.org/grpc/health/grpc_health_v1"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/types/known/emptypb"
	corev1 "k8s.io/api/core/v1"
	runtimeapi "k8s.io/cri-api/pkg/apis/runtime/v1"

	"github.com/nodeward/nodeward/api/v1alpha1"
)

// RuntimeProbe asks the container runtime, through its CRI socket, whether
// it is ready (RuntimeService/Status, which CRI-O and containerd answer);
// where the socket is containerd's it also asks containerd's own health
// service.
type RuntimeProbe struct {
	cfg     RuntimeConfig
	metrics *Metrics

	mu sync.Mutex
	// seen is set once the runtime has answered: a socket that then
	// disappears means the runtime went away (True), while a socket never
	// seen means nothing is known about this host's runtime (Unknown).
	seen bool
}

// NewRuntimeProbe talks to cfg.Endpoint.
func NewRuntimeProbe(cfg RuntimeConfig, m *Metrics) *RuntimeProbe {
	return &RuntimeProbe{cfg: cfg, metrics: orDiscard(m)}
}

func (p *RuntimeProbe) Interval() time.Duration { return p.cfg.PollInterval.Duration }
func (p *RuntimeProbe) Name() string            { return "runtime" }
func (p *RuntimeProbe) Condition() corev1.NodeConditionType {
	return v1alpha1.ConditionRuntimeUnavailable
}

// socketPath accepts unix:///path and /path.
func socketPath(endpoint string) (string, error) {
	path := strings.TrimPrefix(endpoint, "unix://")
	if !strings.HasPrefix(path, "/") {
		return "", errors.New("must be unix:///absolute/path or /absolute/path")
	}
	return path, nil
}

// Sample dials the socket afresh each time, so that a restarted runtime is
// seen at the next sample rather than after gRPC's reconnect back-off.
func (p *RuntimeProbe) Sample(ctx context.Context) Signal {
	s := Signal{Condition: p.Condition(), At: time.Now()}
	p.mu.Lock()
	defer p.mu.Unlock()
	ctx, cancel := context.WithTimeout(ctx, p.cfg.Timeout.Duration)
	defer cancel()
	path, err := socketPath(p.cfg.Endpoint)
	if err != nil {
		return p.unknown(s, "BadEndpoint", fmt.Errorf("runtime endpoint %q: %w", p.cfg.Endpoint, err))
	}
	if _, err := os.Stat(path); errors.Is(err, fs.ErrNotExist) && !p.seen {
		return p.unknown(s, "NoRuntimeSocket", fmt.Errorf("no container runtime socket at %s", path))
	}
	conn, err := grpc.NewClient("unix://"+path, grpc.WithTransportCredentials(insecure.NewCredentials()))
	if err != nil {
		return p.unknown(s, "BadEndpoint", fmt.Errorf("dial %s: %w", path, err))
	}
	defer conn.Close()

	cri := runtimeapi.NewRuntimeServiceClient(conn)
	st, err := cri.Status(ctx, &runtimeapi.StatusRequest{})
	if err != nil {
		return p.down(s, "RuntimeUnreachable", fmt.Errorf("CRI Status on %s: %w", path, err))
	}
	p.seen = true
	name := "container runtime"
	if v, err := cri.Version(ctx, &runtimeapi.VersionRequest{}); err == nil {
		name = v.RuntimeName + " " + v.RuntimeVersion
	}
	var runtimeReady bool
	var notes []string
	for _, c := range st.GetStatus().GetConditions() {
		switch c.Type {
		case runtimeapi.RuntimeReady:
			runtimeReady = c.Status
			if !c.Status {
				notes = append(notes, fmt.Sprintf("RuntimeReady false: %s %s", c.Reason, c.Message))
			}
		case runtimeapi.NetworkReady:
			// The CNI's business and the kubelet's Ready condition's; noted
			// for people, not a reason for this condition.
			if !c.Status {
				notes = append(notes, "NetworkReady false: "+c.Reason)
			}
		}
	}
	if !runtimeReady {
		return p.down(s, "RuntimeNotReady", fmt.Errorf("%s on %s: %s", name, path, strings.Join(notes, "; ")))
	}
	if err := containerdServing(ctx, conn); err != nil {
		return p.down(s, "ContainerdNotServing", fmt.Errorf("%s on %s: %w", name, path, err))
	}
	p.metrics.setGauge(p.metrics.runtimeUp, 1)
	s.Health, s.Reason = Healthy, "RuntimeReady"
	s.Message = fmt.Sprintf("%s on %s is ready", name, path)
	if len(notes) > 0 {
		s.Message += " (" + strings.Join(notes, "; ") + ")"
	}
	return s
}

// containerdVersionMethod is containerd's version service (request: an
// empty message). Only containerd serves it, so it tells a containerd socket
// from another runtime's. Called by name rather than through containerd's
// client module: that module links Go's plugin package, which makes the
// linker keep every exported method and export every symbol, and would
// more than double the agent's resident binary pages.
const containerdVersionMethod = "/containerd.services.version.v1.Version/Version"

// containerdServing asks containerd's health service (the standard gRPC
// one), when the socket is containerd's; other runtimes pass.
func containerdServing(ctx context.Context, conn *grpc.ClientConn) error {
	if ok, err := isContainerd(ctx, conn); err != nil || !ok {
		return err
	}
	resp, err := healthpb.NewHealthClient(conn).Check(ctx, &healthpb.HealthCheckRequest{}, grpc.WaitForReady(true))
	if err != nil {
		return fmt.Errorf("containerd health: %w", err)
	}
	if resp.GetStatus() != healthpb.HealthCheckResponse_SERVING {
		return fmt.Errorf("containerd health service says %s", resp.GetStatus())
	}
	return nil
}

// isContainerd reports whether the socket serves containerd's version
// service. The reply (version, revision) is not needed: decoded into Empty,
// its fields are kept as unknown fields and ignored.
func isContainerd(ctx context.Context, conn *grpc.ClientConn) (bool, error) {
	if err := conn.Invoke(ctx, containerdVersionMethod, &emptypb.Empty{}, &emptypb.Empty{}); err != nil {
		if status.Code(err) == codes.Unimplemented {
			return false, nil
		}
		return false, fmt.Errorf("containerd version: %w", err)
	}
	return true, nil
}

func (p *RuntimeProbe) down(s Signal, reason string, err error) Signal {
	p.metrics.setGauge(p.metrics.runtimeUp, 0)
	if !p.seen {
		return p.unknown(s, reason, err)
	}
	s.Health, s.Reason, s.Message = Unhealthy, reason, err.Error()
	return s
}

func (p *RuntimeProbe) unknown(s Signal, reason string, err error) Signal {
	p.metrics.ProbeError(p.Name())
	p.metrics.setGauge(p.metrics.runtimeUp, 0)
	s.Health, s.Reason, s.Message = Unknown, reason, err.Error()
	return s
}
