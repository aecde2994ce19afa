package conditions

import (
	"context"
	"errors"
	"fmt"
	"net"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/vishvananda/netlink"
	"github.com/vishvananda/netns"
	"golang.org/x/sys/unix"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/nodeward/nodeward/api/v1alpha1"
)

const (
	networkName      = "network"
	networkCondition = v1alpha1.ConditionNetworkUnavailable
)

var networkKind = probeKind{
	name: networkName, conditions: []conditionRow{{networkCondition, "network-unavailable"}},
	section: func(c *Config) section { return &c.Network },
	build: func(c *Config, env *Env) []Probe {
		var opts []NetworkOption
		if env != nil {
			opts = env.NetworkOptions
		}
		return []Probe{NewNetworkProbe(c.Network, env, opts...)}
	},
}

// NetworkConfig: a default route whose link is up with carrier and holds a
// global address.
type NetworkConfig struct {
	Enabled bool `json:"enabled"`
	// Family is "ipv4", "ipv6" or "any" (either family's default route).
	Family string `json:"family"`
	// Interface, when set, must be the default route's output link.
	Interface string `json:"interface,omitempty"`
	// RelistInterval re-reads everything as a backstop to the events.
	RelistInterval metav1.Duration `json:"relistInterval"`
}

func (c *NetworkConfig) enabled() bool { return c.Enabled }

func (c *NetworkConfig) setDefaults() {
	*c = NetworkConfig{Enabled: true, Family: "any", RelistInterval: metav1.Duration{Duration: time.Minute}}
}

func (c *NetworkConfig) validate(prefix string, errs *FieldErrors) {
	switch c.Family {
	case "ipv4", "ipv6", "any":
	default:
		errs.Add(prefix+"family", c.Family, `must be "ipv4", "ipv6" or "any"`)
	}
	errs.positive(prefix+"relistInterval", c.RelistInterval)
}

// networkMetrics: the verdict as a gauge, the event socket's overflows and
// its re-openings.
type networkMetrics struct {
	up           prometheus.Gauge
	overflows    prometheus.Counter
	resubscribes prometheus.Counter
}

func newNetworkMetrics(reg prometheus.Registerer) *networkMetrics {
	m := &networkMetrics{
		up: gauge("network_up", "1 when a default route leaves through an up link with carrier and a global address."),
		overflows: prometheus.NewCounter(prometheus.CounterOpts{Name: "nodeward_netlink_overflows_total",
			Help: "Overflows of the netlink event socket (ENOBUFS after a burst): events were dropped, and the probe sampled the whole state instead."}),
		resubscribes: prometheus.NewCounter(prometheus.CounterOpts{Name: "nodeward_netlink_resubscribes_total",
			Help: "Netlink event sockets re-opened after a receive error other than an overflow."}),
	}
	reg.MustRegister(m.up, m.overflows, m.resubscribes)
	return m
}

// NetworkProbe decides network availability from netlink: available when a
// default route (of the configured family) leaves through a link that is up,
// has carrier and holds a global address. Link, address and route events
// wake it at once.
type NetworkProbe struct {
	cfg     NetworkConfig
	metrics *networkMetrics
	now     func() time.Time
	// ns is the network namespace to watch; -1 (netns.None) is the
	// caller's own.
	ns netns.NsHandle

	// initialBuffer is the first netlink receive buffer (tests shrink it
	// to provoke ENOBUFS); overflows counts them, resubscribes the event
	// sockets re-opened after another error.
	initialBuffer int
	overflows     atomic.Int64
	resubscribes  atomic.Int64
	// unprivileged is set once a subscription as root failed with EPERM
	// (no CAP_NET_ADMIN); later ones use an ordinary buffer at once.
	unprivileged atomic.Bool

	mu     sync.Mutex
	handle *netlink.Handle
}

// NetworkOption adjusts a NetworkProbe.
type NetworkOption func(*NetworkProbe)

// InNetworkNamespace makes the probe read and subscribe inside ns instead
// of the process's namespace (tests use a throw-away namespace).
func InNetworkNamespace(ns netns.NsHandle) NetworkOption {
	return func(p *NetworkProbe) { p.ns = ns }
}

// NewNetworkProbe watches the process's network namespace unless an option
// says otherwise, and registers its metrics on env's Registerer; a nil env
// stands for the defaults.
func NewNetworkProbe(cfg NetworkConfig, env *Env, opts ...NetworkOption) *NetworkProbe {
	p := &NetworkProbe{cfg: cfg, metrics: newNetworkMetrics(env.registerer()), now: env.now(),
		ns: netns.None(), initialBuffer: netlinkInitialBuffer}
	for _, o := range opts {
		o(p)
	}
	return p
}

func (p *NetworkProbe) Interval() time.Duration { return p.cfg.RelistInterval.Duration }
func (p *NetworkProbe) Name() string            { return networkName }
func (p *NetworkProbe) Condition() corev1.NodeConditionType {
	return networkCondition
}

// Close releases the netlink socket.
func (p *NetworkProbe) Close() {
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.handle != nil {
		p.handle.Close()
		p.handle = nil
	}
}

func (p *NetworkProbe) netlinkHandle() (*netlink.Handle, error) {
	if p.handle != nil {
		return p.handle, nil
	}
	var err error
	if p.ns.IsOpen() {
		p.handle, err = netlink.NewHandleAt(p.ns)
	} else {
		p.handle, err = netlink.NewHandle()
	}
	if err != nil {
		return nil, fmt.Errorf("open netlink socket: %w", err)
	}
	return p.handle, nil
}

func (p *NetworkProbe) families() []int {
	switch p.cfg.Family {
	case "ipv4":
		return []int{netlink.FAMILY_V4}
	case "ipv6":
		return []int{netlink.FAMILY_V6}
	}
	return []int{netlink.FAMILY_V4, netlink.FAMILY_V6}
}

// Sample lists routes, links and addresses once.
func (p *NetworkProbe) Sample(context.Context) Signal {
	s := Signal{Condition: p.Condition(), At: p.now()}
	p.mu.Lock()
	defer p.mu.Unlock()
	h, err := p.netlinkHandle()
	if err != nil {
		return unknown(s, "NetlinkUnreadable", err)
	}
	var problems []string
	reason := "NoDefaultRoute"
	for _, family := range p.families() {
		routes, err := h.RouteList(nil, family)
		if errors.Is(err, netlink.ErrDumpInterrupted) {
			routes, err = h.RouteList(nil, family) // the table changed under the dump
		}
		if err != nil {
			return unknown(s, "NetlinkUnreadable", fmt.Errorf("list routes: %w", err))
		}
		for _, r := range routes {
			if !isDefaultRoute(r) {
				continue
			}
			for _, index := range routeLinks(r) {
				ok, why, err := p.checkLink(h, index, family)
				if err != nil {
					return unknown(s, "NetlinkUnreadable", err)
				}
				if ok {
					p.metrics.up.Set(1)
					s.Verdict, s.Reason, s.Message = Healthy, "DefaultRouteUp", why
					return s
				}
				if len(problems) == 0 {
					reason = strings.SplitN(why, ":", 2)[0]
				}
				problems = append(problems, why)
			}
		}
	}
	if len(problems) == 0 {
		problems = append(problems, fmt.Sprintf("no default route (%s)", p.cfg.Family))
	}
	p.metrics.up.Set(0)
	s.Verdict, s.Reason, s.Message = Unhealthy, reason, strings.Join(problems, "; ")
	return s
}

// checkLink answers whether link index carries a usable default route; why
// starts with a CamelCase reason when it does not.
func (p *NetworkProbe) checkLink(h *netlink.Handle, index, family int) (ok bool, why string, err error) {
	link, err := h.LinkByIndex(index)
	if err != nil {
		var linkNotFound netlink.LinkNotFoundError
		if errors.As(err, &linkNotFound) {
			return false, fmt.Sprintf("LinkGone: default route's link %d is gone", index), nil
		}
		return false, "", fmt.Errorf("read link %d: %w", index, err)
	}
	a := link.Attrs()
	if p.cfg.Interface != "" && a.Name != p.cfg.Interface {
		return false, fmt.Sprintf("OtherInterface: default route leaves through %s, not %s", a.Name, p.cfg.Interface), nil
	}
	if a.Flags&net.FlagUp == 0 {
		return false, fmt.Sprintf("LinkDown: %s is administratively down", a.Name), nil
	}
	carrier := a.OperState == netlink.OperUp ||
		(a.OperState == netlink.OperUnknown && a.RawFlags&unix.IFF_LOWER_UP != 0)
	if !carrier {
		return false, fmt.Sprintf("NoCarrier: %s has no carrier (operstate %s)", a.Name, a.OperState), nil
	}
	addrs, err := h.AddrList(link, family)
	if err != nil && !errors.Is(err, netlink.ErrDumpInterrupted) {
		return false, "", fmt.Errorf("list addresses of %s: %w", a.Name, err)
	}
	for _, addr := range addrs {
		usable := addr.Flags&(unix.IFA_F_TENTATIVE|unix.IFA_F_DADFAILED) == 0
		if addr.Scope == unix.RT_SCOPE_UNIVERSE && usable {
			return true, fmt.Sprintf("default route through %s (up, carrier, %s)", a.Name, addr.IPNet), nil
		}
	}
	return false, fmt.Sprintf("NoGlobalAddress: %s holds no global address", a.Name), nil
}

func isDefaultRoute(r netlink.Route) bool {
	if r.Dst == nil {
		return true
	}
	ones, _ := r.Dst.Mask.Size()
	return ones == 0 && r.Dst.IP.IsUnspecified()
}

func routeLinks(r netlink.Route) []int {
	if len(r.MultiPath) == 0 {
		return []int{r.LinkIndex}
	}
	links := make([]int, 0, len(r.MultiPath))
	for _, hop := range r.MultiPath {
		links = append(links, hop.LinkIndex)
	}
	return links
}
