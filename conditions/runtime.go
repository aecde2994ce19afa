package conditions

import (
	"context"
	"errors"
	"fmt"
	"io/fs"
	"log/slog"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/credentials/insecure"
	"google.golang.org/grpc/status"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/nodeward/nodeward/api/v1alpha1"
)

const (
	runtimeName      = "runtime"
	runtimeCondition = v1alpha1.ConditionRuntimeUnavailable
)

var runtimeKind = probeKind{
	name: runtimeName, conditions: []conditionRow{{runtimeCondition, "runtime-unavailable"}},
	section: func(c *Config) section { return &c.Runtime },
	build:   func(c *Config, env *Env) []Probe { return []Probe{NewRuntimeProbe(c.Runtime, env)} },
}

// RuntimeConfig: the container runtime's CRI socket.
type RuntimeConfig struct {
	Enabled bool `json:"enabled"`
	// Endpoint is the CRI socket, unix:///path or /path; empty finds it as
	// crictl does (RuntimeEndpointCandidates), so that one DaemonSet serves
	// containerd and CRI-O nodes alike.
	Endpoint     string          `json:"endpoint,omitempty"`
	Timeout      metav1.Duration `json:"timeout"`
	PollInterval metav1.Duration `json:"pollInterval"`
}

func (c *RuntimeConfig) enabled() bool { return c.Enabled }

func (c *RuntimeConfig) setDefaults() {
	*c = RuntimeConfig{Enabled: true,
		Timeout: metav1.Duration{Duration: 2 * time.Second}, PollInterval: metav1.Duration{Duration: 5 * time.Second}}
}

func (c *RuntimeConfig) validate(prefix string, errs *FieldErrors) {
	errs.positive(prefix+"timeout", c.Timeout)
	errs.positive(prefix+"pollInterval", c.PollInterval)
	if c.Enabled && c.Endpoint != "" {
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

// RuntimeEndpointCandidates are the CRI sockets tried, in this order, when
// no endpoint is configured: crictl's default list (cri-tools,
// cmd/crictl/main_unix.go), so that nodeward and crictl on one host agree
// on which runtime is "the" runtime. A function, not a variable: nothing
// may change the list under a running probe.
func RuntimeEndpointCandidates() []string {
	return []string{
		"unix:///run/containerd/containerd.sock",
		"unix:///run/crio/crio.sock",
		"unix:///var/run/cri-dockerd.sock",
	}
}

// RuntimeProbe asks the container runtime, through its CRI socket, whether
// it is ready (RuntimeService/Status, which CRI-O and containerd answer);
// where the socket is containerd's it also asks containerd's own health
// service. Without a configured endpoint it finds the runtime as crictl
// does, and looks again at every sample until one answers, so that a
// runtime started after the agent is found.
type RuntimeProbe struct {
	cfg  RuntimeConfig
	up   prometheus.Gauge
	now  func() time.Time
	log  *slog.Logger
	root string // prefixes the candidates' paths (Env.RuntimeRoot)

	mu sync.Mutex
	// seen is set once the runtime has answered: a socket that then
	// disappears means the runtime went away (True), while a socket never
	// seen means nothing is known about this host's runtime (Unknown).
	seen bool
	// active is the socket that last answered CRI Status when detecting;
	// it is asked first, and its failure is the one reported while no
	// other candidate answers.
	active string
	// warned is the last unsupported-CRI message logged.
	warned string
}

// NewRuntimeProbe talks to cfg.Endpoint (or the first candidate that
// answers) and registers nodeward_runtime_up on env's Registerer; a nil env
// stands for the defaults.
func NewRuntimeProbe(cfg RuntimeConfig, env *Env) *RuntimeProbe {
	p := &RuntimeProbe{cfg: cfg, up: newRuntimeUp(env.registerer()), now: env.now(), log: slog.Default()}
	if env != nil {
		p.root = env.RuntimeRoot
		if env.Log != nil {
			p.log = env.Log
		}
	}
	return p
}

func (p *RuntimeProbe) Interval() time.Duration             { return p.cfg.PollInterval.Duration }
func (p *RuntimeProbe) Name() string                        { return runtimeName }
func (p *RuntimeProbe) Condition() corev1.NodeConditionType { return runtimeCondition }

// Endpoint is the socket in use: the configured one, else the detected
// one, else "" while no candidate has answered.
func (p *RuntimeProbe) Endpoint() string {
	if p.cfg.Endpoint != "" {
		return p.cfg.Endpoint
	}
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.active == "" {
		return ""
	}
	return "unix://" + p.active
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
	s := Signal{Condition: p.Condition(), At: p.now()}
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.cfg.Endpoint == "" {
		return p.detect(ctx, s)
	}
	path, err := socketPath(p.cfg.Endpoint)
	if err != nil {
		return p.unread(s, "BadEndpoint", fmt.Errorf("runtime endpoint %q: %w", p.cfg.Endpoint, err))
	}
	if _, err := os.Stat(path); errors.Is(err, fs.ErrNotExist) && !p.seen {
		return p.unread(s, "NoRuntimeSocket", fmt.Errorf("no container runtime socket at %s", path))
	}
	return p.signal(s, p.query(ctx, path))
}

// detect asks the candidates whose socket exists, the one that answered
// last first, and reports the first that answers CRI Status; when none
// does, the failure of the last active one (or of the first present).
// A socket file left behind by a stopped runtime is asked too: it fails
// fast (connection refused).
func (p *RuntimeProbe) detect(ctx context.Context, s Signal) Signal {
	var paths []string
	if p.active != "" {
		paths = append(paths, p.active)
	}
	var tried []string
	for _, c := range RuntimeEndpointCandidates() {
		path, _ := socketPath(c) // the candidates are absolute
		path = filepath.Join("/", p.root, path)
		tried = append(tried, path)
		if path != p.active {
			paths = append(paths, path)
		}
	}
	var failed *runtimeAnswer
	for _, path := range paths {
		if _, err := os.Stat(path); errors.Is(err, fs.ErrNotExist) && path != p.active {
			continue
		}
		a := p.query(ctx, path)
		if a.answered {
			if path != p.active {
				p.log.Info("container runtime endpoint found", "endpoint", "unix://"+path, "previous", p.active)
				p.active = path
			}
			return p.signal(s, a)
		}
		if failed == nil {
			failed = &a
		}
	}
	if failed == nil {
		return p.unread(s, "NoRuntimeSocket", fmt.Errorf("no container runtime socket at any of %s", strings.Join(tried, ", ")))
	}
	return p.signal(s, *failed)
}

// runtimeAnswer is one conversation with a runtime socket.
type runtimeAnswer struct {
	path string
	// answered: CRI Status replied, so a CRI runtime listens there, or
	// something answered it Unimplemented.
	answered bool
	// unsupported: what answered is no runtime.v1 CRI runtime (olderCRI),
	// so its health is unknown, not bad.
	unsupported bool
	healthy     bool
	reason      string
	message     string
	err         error
}

// query asks the runtime on path within the configured timeout.
func (p *RuntimeProbe) query(ctx context.Context, path string) runtimeAnswer {
	ctx, cancel := context.WithTimeout(ctx, p.cfg.Timeout.Duration)
	defer cancel()
	a := runtimeAnswer{path: path}
	conn, err := grpc.NewClient("unix://"+path, grpc.WithTransportCredentials(insecure.NewCredentials()))
	if err != nil {
		a.reason, a.err = "BadEndpoint", fmt.Errorf("dial %s: %w", path, err)
		return a
	}
	defer conn.Close()

	reply, err := invokeRaw(ctx, conn, criStatusMethod)
	if err != nil {
		return olderCRI(ctx, conn, path, err)
	}
	a.answered = true
	conds, err := decodeCRIStatus(reply)
	if err != nil {
		a.reason, a.err = "RuntimeNotReady", fmt.Errorf("CRI Status on %s: %w", path, err)
		return a
	}
	name, versionNotes := describeRuntime(ctx, conn)
	runtimeReady, notes := readiness(conds)
	notes = append(versionNotes, notes...)
	if !runtimeReady {
		a.reason, a.err = "RuntimeNotReady", fmt.Errorf("%s on %s: %s", name, path, strings.Join(notes, "; "))
		return a
	}
	if err := containerdServing(ctx, conn); err != nil {
		a.reason, a.err = "ContainerdNotServing", fmt.Errorf("%s on %s: %w", name, path, err)
		return a
	}
	a.healthy, a.reason = true, "RuntimeReady"
	a.message = fmt.Sprintf("%s on unix://%s is ready", name, path)
	if len(notes) > 0 {
		a.message += " (" + strings.Join(notes, "; ") + ")"
	}
	return a
}

// olderCRI explains a failed CRI Status. Unimplemented means a gRPC server
// listens there that lacks runtime.v1's Status: a runtime of an older CRI
// (v1alpha2, which Kubernetes 1.26 dropped) if its Version answers there,
// else something that is no CRI runtime. Either is up, so neither is
// reported down: the sample is Unknown, its message saying why. Any other
// error is the runtime unreachable.
func olderCRI(ctx context.Context, conn *grpc.ClientConn, path string, statusErr error) runtimeAnswer {
	a := runtimeAnswer{path: path, reason: "RuntimeUnreachable", err: fmt.Errorf("CRI Status on %s: %w", path, statusErr)}
	if status.Code(statusErr) != codes.Unimplemented {
		return a
	}
	a.answered, a.unsupported, a.reason = true, true, "CRIVersionUnsupported"
	reply, err := invokeRaw(ctx, conn, criV1alpha2VersionMethod)
	if err != nil {
		a.err = fmt.Errorf("unix://%s answers gRPC but not CRI runtime.v1 Status (%v), nor CRI v1alpha2 Version (%v): no CRI runtime this probe reads", path, statusErr, err)
		return a
	}
	v, err := decodeCRIVersion(reply)
	if err != nil {
		a.err = fmt.Errorf("CRI v1alpha2 Version on %s: %w", path, err)
		return a
	}
	a.err = fmt.Errorf("%s %s on unix://%s speaks CRI %s, not runtime.v1: its readiness is not read (the kubelet needs runtime.v1 too)",
		v.RuntimeName, v.RuntimeVersion, path, v.RuntimeAPIVersion)
	return a
}

// describeRuntime names the runtime by its CRI Version answer, with notes
// when that answer is missing or reports a CRI older than runtime.v1
// (the runtime answered runtime.v1's Status, so it is read all the same).
func describeRuntime(ctx context.Context, conn *grpc.ClientConn) (string, []string) {
	reply, err := invokeRaw(ctx, conn, criVersionMethod)
	if err != nil {
		return "container runtime", []string{fmt.Sprintf("CRI Version: %s", status.Code(err))}
	}
	v, err := decodeCRIVersion(reply)
	if err != nil {
		return "container runtime", []string{err.Error()}
	}
	name := v.RuntimeName + " " + v.RuntimeVersion
	if api := v.RuntimeAPIVersion; api != "" && api != criAPIVersion {
		return name, []string{fmt.Sprintf("reports CRI %s, older than %s", api, criAPIVersion)}
	}
	return name, nil
}

// signal turns an answer into the sample.
func (p *RuntimeProbe) signal(s Signal, a runtimeAnswer) Signal {
	if a.answered {
		p.seen = true
	}
	if a.unsupported {
		if msg := a.err.Error(); msg != p.warned { // once, not at every sample
			p.log.Warn("container runtime speaks a CRI the probe does not read", "endpoint", "unix://"+a.path, "err", a.err)
			p.warned = msg
		}
		return p.unread(s, a.reason, a.err)
	}
	if !a.healthy {
		return p.down(s, a.reason, a.err)
	}
	p.up.Set(1)
	s.Verdict, s.Reason, s.Message = Healthy, a.reason, a.message
	return s
}

// readiness reads RuntimeReady from a CRI status; notes say what is not
// ready, NetworkReady included (the CNI's business and the kubelet's Ready
// condition's: noted for people, not a reason for this condition).
func readiness(conds []criCondition) (runtimeReady bool, notes []string) {
	for _, c := range conds {
		switch c.Type {
		case criRuntimeReady:
			runtimeReady = c.Status
			if !c.Status {
				notes = append(notes, fmt.Sprintf("RuntimeReady false: %s %s", c.Reason, c.Message))
			}
		case criNetworkReady:
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

// The CRI's runtime service and the standard gRPC health check, by name
// (their messages: crimsg.go).
const (
	criStatusMethod  = "/runtime.v1.RuntimeService/Status"
	criVersionMethod = "/runtime.v1.RuntimeService/Version"
	// criV1alpha2VersionMethod is the older CRI's Version, asked only to
	// name a runtime that lacks runtime.v1.
	criV1alpha2VersionMethod = "/runtime.v1alpha2.RuntimeService/Version"
	// criAPIVersion is the CRI version runtime.v1 runtimes report.
	criAPIVersion = "v1"
	healthMethod  = "/grpc.health.v1.Health/Check"
)

// containerdServing asks containerd's health service (the standard gRPC
// one), when the socket is containerd's; other runtimes pass.
func containerdServing(ctx context.Context, conn *grpc.ClientConn) error {
	if ok, err := isContainerd(ctx, conn); err != nil || !ok {
		return err
	}
	reply, err := invokeRaw(ctx, conn, healthMethod, grpc.WaitForReady(true))
	if err != nil {
		return fmt.Errorf("containerd health: %w", err)
	}
	serving, err := decodeHealth(reply)
	if err != nil {
		return fmt.Errorf("containerd health: %w", err)
	}
	if serving != healthServing {
		return fmt.Errorf("containerd health service says %s", healthStatusName(serving))
	}
	return nil
}

// isContainerd reports whether the socket serves containerd's version
// service. The reply (version, revision) is not needed.
func isContainerd(ctx context.Context, conn *grpc.ClientConn) (bool, error) {
	if _, err := invokeRaw(ctx, conn, containerdVersionMethod); err != nil {
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
