package conditions

import (
	"context"
	"fmt"
	"log/slog"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/vishvananda/netns"
	"golang.org/x/sys/unix"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/nodeward/nodeward/test/testenv"
)

var netnsCounter atomic.Int32

// TestNetns is a throw-away network namespace with a veth pair (nw0 with
// 10.77.0.1/24, its peer nw1) and a default route through nw0. The host's
// network is never touched: every command runs with `ip -n`.
type TestNetns struct {
	t      testing.TB
	Name   string
	Handle netns.NsHandle
}

// NewTestNetns needs root and the ip command.
func NewTestNetns(t testing.TB) *TestNetns {
	t.Helper()
	testenv.RequireRoot(t)
	testenv.RequireBinary(t, "ip")
	n := &TestNetns{t: t, Name: fmt.Sprintf("nwtest-%d-%d", os.Getpid(), netnsCounter.Add(1))}
	n.IP("netns", "add", n.Name)
	t.Cleanup(func() { exec.Command("ip", "netns", "del", n.Name).Run() })
	h, err := netns.GetFromName(n.Name)
	if err != nil {
		t.Fatalf("open netns %s: %v", n.Name, err)
	}
	t.Cleanup(func() { h.Close() })
	n.Handle = h
	n.In("link", "add", "nw0", "type", "veth", "peer", "name", "nw1")
	n.In("addr", "add", "10.77.0.1/24", "dev", "nw0")
	n.In("link", "set", "nw0", "up")
	n.In("link", "set", "nw1", "up")
	n.In("route", "add", "default", "via", "10.77.0.2", "dev", "nw0")
	return n
}

// IP runs the ip command.
func (n *TestNetns) IP(args ...string) {
	n.t.Helper()
	if out, err := exec.Command("ip", args...).CombinedOutput(); err != nil {
		n.t.Fatalf("ip %s: %v: %s", strings.Join(args, " "), err, out)
	}
}

// In runs an ip command inside the namespace.
func (n *TestNetns) In(args ...string) { n.IP(append([]string{"-n", n.Name}, args...)...) }

// watchNetwork runs an IPv4 network probe in ns under a monitor (one bad
// sample, relist an hour away, so only events can move it) until the test
// ends; tune adjusts the probe before it starts.
func watchNetwork(t *testing.T, ns *TestNetns, tune func(*NetworkProbe)) (*NetworkProbe, *Monitor) {
	t.Helper()
	cfg := NetworkConfig{Enabled: true, Family: "ipv4", RelistInterval: metav1.Duration{Duration: time.Hour}}
	probe := NewNetworkProbe(cfg, nil, InNetworkNamespace(ns.Handle))
	if tune != nil {
		tune(probe)
	}
	mon := NewMonitor(MonitorConfig{Probes: []Probe{probe}, Hysteresis: HysteresisConfig{BadSamples: 1}, Log: slog.New(slog.DiscardHandler)})
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan struct{})
	go func() { mon.Run(ctx); close(done) }()
	t.Cleanup(func() { cancel(); <-done; probe.Close() })
	return probe, mon
}

// TestNetworkProbeFollowsNetlinkEvents: link down, carrier lost, route
// deleted and address removed each make the network unavailable, and the
// probe notices through events alone (the relist is an hour away).
func TestNetworkProbeFollowsNetlinkEvents(t *testing.T) {
	t.Parallel()
	ns := NewTestNetns(t)
	_, mon := watchNetwork(t, ns, nil)
	status := func() corev1.ConditionStatus { return mon.Conditions()[0].Status }
	reason := func() string { return mon.Conditions()[0].Reason }

	waitStatus(t, 5*time.Second, status, corev1.ConditionFalse)
	steps := []struct {
		name         string
		breakIt, fix [][]string
		reason       string
	}{
		{"link down", [][]string{{"link", "set", "nw0", "down"}},
			[][]string{{"link", "set", "nw0", "up"}, {"route", "add", "default", "via", "10.77.0.2", "dev", "nw0"}}, "NoDefaultRoute"},
		{"carrier lost", [][]string{{"link", "set", "nw1", "down"}}, [][]string{{"link", "set", "nw1", "up"}}, "NoCarrier"},
		{"route deleted", [][]string{{"route", "del", "default"}},
			[][]string{{"route", "add", "default", "via", "10.77.0.2", "dev", "nw0"}}, "NoDefaultRoute"},
		// The kernel drops a link's IPv4 routes with its last IPv4
		// address, and a gateway route with its subnet: a link-scope
		// address and a device route keep the default route alive.
		{"address removed", [][]string{{"addr", "add", "10.78.0.1/24", "dev", "nw0", "scope", "link"},
			{"route", "replace", "default", "dev", "nw0"}, {"addr", "del", "10.77.0.1/24", "dev", "nw0"}},
			[][]string{{"addr", "add", "10.77.0.1/24", "dev", "nw0"}}, "NoGlobalAddress"},
	}
	for _, step := range steps {
		for _, args := range step.breakIt {
			ns.In(args...)
		}
		waitStatus(t, 5*time.Second, status, corev1.ConditionTrue)
		if reason() != step.reason {
			t.Errorf("%s: reason %q, want %q (%s)", step.name, reason(), step.reason, mon.Conditions()[0].Message)
		}
		for _, args := range step.fix {
			ns.In(args...)
		}
		waitStatus(t, 5*time.Second, status, corev1.ConditionFalse)
	}
}

// TestNetworkProbeInterfaceAndFamily: a named interface other than the
// route's, or a family without a default route, is unavailable.
func TestNetworkProbeInterfaceAndFamily(t *testing.T) {
	t.Parallel()
	ns := NewTestNetns(t)
	sample := func(cfg NetworkConfig) Signal {
		cfg.RelistInterval = metav1.Duration{Duration: time.Minute}
		p := NewNetworkProbe(cfg, nil, InNetworkNamespace(ns.Handle))
		defer p.Close()
		return p.Sample(context.Background())
	}
	if s := sample(NetworkConfig{Family: "any"}); s.Verdict != Healthy || !strings.Contains(s.Message, "nw0") {
		t.Errorf("any: %v %q", s.Verdict, s.Message)
	}
	if s := sample(NetworkConfig{Family: "ipv6"}); s.Verdict != Unhealthy || s.Reason != "NoDefaultRoute" {
		t.Errorf("ipv6 without a default route: %v %s", s.Verdict, s.Reason)
	}
	if s := sample(NetworkConfig{Family: "ipv4", Interface: "eth9"}); s.Verdict != Unhealthy || s.Reason != "OtherInterface" {
		t.Errorf("other interface: %v %s", s.Verdict, s.Reason)
	}
}

// TestNetworkProbeFollowsEventsAfterOverflow: with a receive buffer of the
// kernel's minimum, a burst of 4000 address changes overflows the netlink
// socket (ENOBUFS). The probe counts the overflow, enlarges the buffer and
// still follows events on the same socket: a lost carrier after the burst
// turns the condition True without waiting for the relist (an hour).
func TestNetworkProbeFollowsEventsAfterOverflow(t *testing.T) {
	t.Parallel()
	ns := NewTestNetns(t)
	probe, mon := watchNetwork(t, ns, func(p *NetworkProbe) {
		p.initialBuffer = 1 // the kernel raises it to its minimum
	})
	status := func() corev1.ConditionStatus { return mon.Conditions()[0].Status }
	waitStatus(t, 5*time.Second, status, corev1.ConditionFalse)

	batch := filepath.Join(t.TempDir(), "burst")
	var b strings.Builder
	for i := range 4000 {
		fmt.Fprintf(&b, "addr add 10.90.%d.%d/32 dev nw1\n", i/250, i%250+1)
	}
	if err := os.WriteFile(batch, []byte(b.String()), 0o600); err != nil {
		t.Fatal(err)
	}
	deadline := time.Now().Add(30 * time.Second)
	for probe.overflows.Load() == 0 {
		if time.Now().After(deadline) {
			t.Fatal("no overflow after address bursts for 30 s: the socket never overflowed")
		}
		ns.In("-batch", batch)
		ns.In("addr", "flush", "dev", "nw1")
	}
	ns.In("link", "set", "nw1", "down") // nw0 loses its carrier
	waitStatus(t, 5*time.Second, status, corev1.ConditionTrue)
	if r := mon.Conditions()[0].Reason; r != "NoCarrier" {
		t.Errorf("reason %q after the overflow, want NoCarrier", r)
	}
	ns.In("link", "set", "nw1", "up")
	waitStatus(t, 5*time.Second, status, corev1.ConditionFalse)
	if n := probe.resubscribes.Load(); n != 0 {
		t.Errorf("%d re-opened sockets: an overflow must not close the socket", n)
	}
	t.Logf("overflows: %d", probe.overflows.Load())
}

// TestNetworkProbeSubscribesWithoutCapNetAdmin: root without CAP_NET_ADMIN
// (the DaemonSet drops it, a hardened unit may) cannot force the netlink
// receive buffer; the probe falls back to an ordinary buffer and events
// still arrive. The capability is dropped from this test's own thread
// only, which dies with the test goroutine.
func TestNetworkProbeSubscribesWithoutCapNetAdmin(t *testing.T) {
	t.Parallel()
	ns := NewTestNetns(t)
	// The probe subscribes in its caller's namespace (the host's, for the
	// agent): this thread enters the test's namespace first.
	probe := NewNetworkProbe(NetworkConfig{Enabled: true, Family: "ipv4", RelistInterval: metav1.Duration{Duration: time.Hour}}, nil)
	t.Cleanup(probe.Close)
	subs := make(chan *eventSocket, 1)
	errs := make(chan error, 1)
	go func() {
		runtime.LockOSThread() // never unlocked: the thread goes with the goroutine
		if err := netns.Set(ns.Handle); err != nil {
			errs <- err
			return
		}
		hdr := unix.CapUserHeader{Version: unix.LINUX_CAPABILITY_VERSION_3}
		var data [2]unix.CapUserData
		if err := unix.Capget(&hdr, &data[0]); err != nil {
			errs <- err
			return
		}
		data[unix.CAP_NET_ADMIN/32].Effective &^= 1 << (unix.CAP_NET_ADMIN % 32)
		if err := unix.Capset(&hdr, &data[0]); err != nil {
			errs <- err
			return
		}
		sub, err := probe.subscribe(1 << 20)
		if err != nil {
			errs <- err
			return
		}
		subs <- sub
	}()
	var sub *eventSocket
	select {
	case err := <-errs:
		t.Fatalf("subscribe without CAP_NET_ADMIN (forced buffer refused: %v): %v", probe.unprivileged.Load(), err)
	case sub = <-subs:
	case <-time.After(10 * time.Second):
		t.Fatal("subscribe did not return")
	}
	defer sub.close()
	if !probe.unprivileged.Load() {
		t.Fatal("the forced buffer was not refused: the test did not drop CAP_NET_ADMIN")
	}
	ns.In("link", "set", "nw1", "down")
	// The event arrives through the ordinary buffer; the socket is closed
	// after 5 s so that a missing event fails instead of hanging.
	timer := time.AfterFunc(5*time.Second, sub.close)
	defer timer.Stop()
	if err := sub.wait(); err != nil {
		t.Fatalf("no netlink event within 5 s of nw1 going down: %v", err)
	}
}

// TestEventSocketWakesUnderAStream: with more messages queued than one
// wait reads, wait still returns (so the probe is woken) after
// netlinkBatch of them, and leaves the rest for the next wait. A
// datagram socket pair stands in for the netlink socket: wait only reads.
func TestEventSocketWakesUnderAStream(t *testing.T) {
	t.Parallel()
	fds, err := unix.Socketpair(unix.AF_UNIX, unix.SOCK_DGRAM|unix.SOCK_NONBLOCK|unix.SOCK_CLOEXEC, 0)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = unix.Close(fds[1]) })
	if err := unix.SetsockoptInt(fds[1], unix.SOL_SOCKET, unix.SO_SNDBUF, 4<<20); err != nil {
		t.Fatal(err)
	}
	if err := unix.SetsockoptInt(fds[0], unix.SOL_SOCKET, unix.SO_RCVBUF, 4<<20); err != nil {
		t.Fatal(err)
	}
	const queued = 3 * netlinkBatch / 2
	for i := range queued {
		if _, err := unix.Write(fds[1], []byte{byte(i)}); err != nil {
			t.Fatalf("queue message %d: %v", i, err)
		}
	}
	sock, err := newEventSocket(fds[0], "stream")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(sock.close)
	done := make(chan error, 1)
	go func() { done <- sock.wait() }()
	select {
	case err := <-done:
		if err != nil {
			t.Fatal(err)
		}
	case <-time.After(5 * time.Second):
		t.Fatal("wait did not return with messages queued")
	}
	left := 0
	for {
		if _, _, err := unix.Recvfrom(fds[0], make([]byte, 16), unix.MSG_DONTWAIT); err != nil {
			break
		}
		left++
	}
	if left != queued-netlinkBatch {
		t.Errorf("%d messages left after one wait, want %d (it reads %d at most)", left, queued-netlinkBatch, netlinkBatch)
	}
}
