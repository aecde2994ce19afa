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

	"github.com/prometheus/client_golang/prometheus"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/credentials/insecure"
	healthpb "google.golang.org/grpc/health/grpc_health_v1"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/types/known/emptypb"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	runtimeapi "k8s.io/cri-api/pkg/apis/runtime/v1"

	"github.com/nodeward/nodeward/api/v1alpha1"
)

const (
	runtimeName      = "runtime"
	runtimeCondition = v1alpha1.ConditionRuntimeUnavailable
)

var runtimeKind = probeKind{
	name: runtimeName, condition: runtimeCondition, taint: "runtime-unavailable",
	section: func(c *Config) section { return &c.Runtime },
	build:   func(c *Config, env *Env) Probe { return NewRuntimeProbe(c.Runtime, env) },
}

// RuntimeConfig: the container runtime's CRI socket.
type RuntimeConfig struct {
	Enabled bool `json:"enabled"`
	// Endpoint is the CRI socket, unix:///path or /path.
	Endpoint     string          `json:"endpoint"`
	Timeout      metav1.Duration `json:"timeout"`
	PollInterval metav1.Duration `json:"pollInterval"`
}

func (c *RuntimeConfig) enabled() bool { return c.Enabled }

func (c *RuntimeConfig) setDefaults() {
	*c = RuntimeConfig{Enabled: true, Endpoint: "unix:///run/containerd/containerd.sock",
		Timeout: metav1.Duration{Duration: 2 * time.Second}, PollInterval: metav1.Duration{Duration: 5 * time.Second}}
}

func (c *RuntimeConfig) validate(prefix string, errs *FieldErrors) {
	errs.positive(prefix+"timeout", c.Timeout)
	errs.positive(prefix+"pollInterval", c.PollInterval)
	if c.Enabled {
		if _, err := socketPath(c.Endpoint); err != nil {
			errs.Add(prefix+"endpoint", c.Endpoint, err.Error())
		}
	}
}

func newRuntimeUp(reg prometheus.Registerer) prometheus.Gauge {
	up := gauge("runtime_up", "1 when the container runtime answers CRI Status with RuntimeReady.")
	reg.MustRegister(up)
	return up
}

// RuntimeProbe asks the container runtime, through its CRI socket, whether
// it is ready (RuntimeService/Status, which CRI-O and containerd answer);
// where the socket is containerd's it also asks containerd's own health
// service.
type RuntimeProbe struct {
	cfg RuntimeConfig
	up  prometheus.Gauge
	now func() time.Time

	mu sync.Mutex
	// seen is set once the runtime has answered: a socket that then
	// disappears means the runtime went away (True), while a socket never
	// seen means nothing is known about this host's runtime (Unknown).
	seen bool
}

// NewRuntimeProbe talks to cfg.Endpoint and registers nodeward_runtime_up
// on env's Registerer; a nil env stands for the defaults.
func NewRuntimeProbe(cfg RuntimeConfig, env *Env) *RuntimeProbe {
	return &RuntimeProbe{cfg: cfg, up: newRuntimeUp(env.registerer()), now: env.now()}
}

func (p *RuntimeProbe) Interval() time.Duration             { return p.cfg.PollInterval.Duration }
func (p *RuntimeProbe) Name() string                        { return runtimeName }
func (p *RuntimeProbe) Condition() corev1.NodeConditionType { return runtimeCondition }

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
	s := Signal{Condition: p.Condition(), At: p.now()}
	p.mu.Lock()
	defer p.mu.Unlock()
	ctx, cancel := context.WithTimeout(ctx, p.cfg.Timeout.Duration)
	defer cancel()
	path, err := socketPath(p.cfg.Endpoint)
	if err != nil {
		return p.unread(s, "BadEndpoint", fmt.Errorf("runtime endpoint %q: %w", p.cfg.Endpoint, err))
	}
	if _, err := os.Stat(path); errors.Is(err, fs.ErrNotExist) && !p.seen {
		return p.unread(s, "NoRuntimeSocket", fmt.Errorf("no container runtime socket at %s", path))
	}
	conn, err := grpc.NewClient("unix://"+path, grpc.WithTransportCredentials(insecure.NewCredentials()))
	if err != nil {
		return p.unread(s, "BadEndpoint", fmt.Errorf("dial %s: %w", path, err))
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
	runtimeReady, notes := readiness(st.GetStatus())
	if !runtimeReady {
		return p.down(s, "RuntimeNotReady", fmt.Errorf("%s on %s: %s", name, path, strings.Join(notes, "; ")))
	}
	if err := containerdServing(ctx, conn); err != nil {
		return p.down(s, "ContainerdNotServing", fmt.Errorf("%s on %s: %w", name, path, err))
	}
	p.up.Set(1)
	s.Verdict, s.Reason = Healthy, "RuntimeReady"
	s.Message = fmt.Sprintf("%s on %s is ready", name, path)
	if len(notes) > 0 {
		s.Message += " (" + strings.Join(notes, "; ") + ")"
	}
	return s
}

// readiness reads RuntimeReady from a CRI status; notes say what is not
// ready, NetworkReady included (the CNI's business and the kubelet's Ready
// condition's: noted for people, not a reason for this condition).
func readiness(st *runtimeapi.RuntimeStatus) (runtimeReady bool, notes []string) {
	for _, c := range st.GetConditions() {
		switch c.Type {
		case runtimeapi.RuntimeReady:
			runtimeReady = c.Status
			if !c.Status {
				notes = append(notes, fmt.Sprintf("RuntimeReady false: %s %s", c.Reason, c.Message))
			}
		case runtimeapi.NetworkReady:
			if !c.Status {
				notes = append(notes, "NetworkReady false: "+c.Reason)
			}
		}
	}
	return runtimeReady, notes
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

// down: a runtime once seen is unavailable; one never seen is unknown.
func (p *RuntimeProbe) down(s Signal, reason string, err error) Signal {
	if !p.seen {
		return p.unread(s, reason, err)
	}
	p.up.Set(0)
	s.Verdict, s.Reason, s.Message = Unhealthy, reason, err.Error()
	return s
}

func (p *RuntimeProbe) unread(s Signal, reason string, err error) Signal {
	p.up.Set(0)
	return unknown(s, reason, err)
}
