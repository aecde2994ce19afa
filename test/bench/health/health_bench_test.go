// Package health benchmarks the node-health path against the real control
// plane: detection → taint visible in the API for network and disk, and the
// agent's idle footprint and API load. Run with
//
//	NODEWARD_TESTBIN_DIR=... go test -run '^$' -bench . -benchtime 30x ./test/bench/health/
//
// (root needed for the network namespace and tmpfs).
package health

import (
	"context"
	"fmt"
	"log/slog"
	"math/rand/v2"
	"os"
	"os/exec"
	"slices"
	"testing"
	"time"

	"github.com/vishvananda/netlink"
	"github.com/vishvananda/netns"
	"golang.org/x/sys/unix"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/fields"
	"k8s.io/client-go/kubernetes"

	"github.com/nodeward/nodeward/api/v1alpha1"
	"github.com/nodeward/nodeward/conditions"
	"github.com/nodeward/nodeward/daemon"
	"github.com/nodeward/nodeward/test/cluster"
	"github.com/nodeward/nodeward/test/measure"
	"github.com/nodeward/nodeward/test/testenv"
)

var env cluster.Env

func TestMain(m *testing.M) { os.Exit(env.Run(m)) }

// benchConfig disables every probe; each benchmark enables its own.
func benchConfig() conditions.Config {
	cfg := conditions.DefaultConfig()
	cfg.Memory.Enabled, cfg.Disk.Enabled, cfg.PIDs.Enabled, cfg.Network.Enabled, cfg.Runtime.Enabled = false, false, false, false, false
	cfg.Hysteresis.QuietPeriod.Duration = 100 * time.Millisecond
	return cfg
}

// runHealth runs the real agent, health half only, and waits until it is
// ready.
func runHealth(b *testing.B, cfg daemon.Config) {
	cfg.Log = slog.New(slog.NewTextHandler(os.Stderr, &slog.HandlerOptions{Level: slog.LevelError}))
	h, err := daemon.New(cfg)
	if err != nil {
		b.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan struct{})
	go func() { h.Run(ctx); close(done) }()
	b.Cleanup(func() { cancel(); <-done })
	deadline := time.Now().Add(30 * time.Second)
	for ok, why := h.Ready(); !ok; ok, why = h.Ready() {
		if time.Now().After(deadline) {
			b.Fatalf("agent not ready: %s", why)
		}
		time.Sleep(20 * time.Millisecond)
	}
}

// taintWatcher reports each time the presence of key on node changes, as
// seen through a watch of that one Node.
func taintWatcher(b *testing.B, client kubernetes.Interface, node, key string) <-chan bool {
	ctx, cancel := context.WithCancel(context.Background())
	b.Cleanup(cancel)
	w, err := client.CoreV1().Nodes().Watch(ctx, metav1.ListOptions{
		FieldSelector: fields.OneTermEqualSelector("metadata.name", node).String()})
	if err != nil {
		b.Fatal(err)
	}
	out := make(chan bool, 16)
	go func() {
		defer w.Stop()
		last := false
		for ev := range w.ResultChan() {
			n, ok := ev.Object.(*corev1.Node)
			if !ok {
				continue
			}
			has := slices.ContainsFunc(n.Spec.Taints, func(t corev1.Taint) bool { return t.Key == key })
			if has != last {
				last = has
				out <- has
			}
		}
	}()
	return out
}

func await(b *testing.B, ch <-chan bool, want bool) time.Time {
	b.Helper()
	select {
	case got := <-ch:
		if got != want {
			b.Fatalf("taint presence %v, want %v", got, want)
		}
		return time.Now()
	case <-time.After(30 * time.Second):
		b.Fatalf("taint presence never became %v", want)
	}
	return time.Time{}
}

// taintLatencies measures b.N times how long after cause the taint is seen,
// then undoes it and waits for the taint to go. prepare, untimed, gives
// each iteration's cause and undo.
func taintLatencies(b *testing.B, changes <-chan bool, prepare func() (cause, undo func())) []time.Duration {
	b.Helper()
	samples := make([]time.Duration, 0, b.N)
	b.ResetTimer()
	for range b.N {
		b.StopTimer()
		cause, undo := prepare()
		b.StartTimer()
		start := time.Now()
		cause()
		samples = append(samples, await(b, changes, true).Sub(start))
		undo()
		await(b, changes, false)
	}
	b.StopTimer()
	return samples
}

func report(b *testing.B, samples []time.Duration) {
	measure.ReportQuantiles(b, "", samples)
	b.ReportMetric(measure.Milliseconds(measure.Quantile(samples, 1)), "max-ms")
	b.ReportMetric(0, "ns/op")
}

func ensureLeaseNamespace(b *testing.B, client kubernetes.Interface) {
	_, err := client.CoreV1().Namespaces().Create(context.Background(),
		&corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: v1alpha1.AgentLeaseNamespace}}, metav1.CreateOptions{})
	if err != nil && !apierrors.IsAlreadyExists(err) {
		b.Fatal(err)
	}
}

// BenchmarkNetworkDetectionToTaint: the peer of the default route's veth
// goes down (carrier lost) → nodeward.io/network-unavailable visible
// through a watch. One sample per iteration.
func BenchmarkNetworkDetectionToTaint(b *testing.B) {
	testenv.RequireRoot(b)
	testenv.RequireBinary(b, "ip")
	cp := env.ControlPlane(b)
	ensureLeaseNamespace(b, cp.Client())
	node := cp.CreateNodes(b, cluster.NodeSpec{Prefix: "bench-net", Count: 1})[0]
	nsName := fmt.Sprintf("nwbench-%d", os.Getpid())
	ipCmd := func(args ...string) {
		if out, err := exec.Command("ip", append([]string{"-n", nsName}, args...)...).CombinedOutput(); err != nil {
			b.Fatalf("ip %v: %v: %s", args, err, out)
		}
	}
	if out, err := exec.Command("ip", "netns", "add", nsName).CombinedOutput(); err != nil {
		b.Fatalf("ip netns add: %v: %s", err, out)
	}
	b.Cleanup(func() { exec.Command("ip", "netns", "del", nsName).Run() })
	ipCmd("link", "add", "nw0", "type", "veth", "peer", "name", "nw1")
	ipCmd("addr", "add", "10.77.0.1/24", "dev", "nw0")
	ipCmd("link", "set", "nw0", "up")
	ipCmd("link", "set", "nw1", "up")
	ipCmd("route", "add", "default", "via", "10.77.0.2", "dev", "nw0")
	ns, err := netns.GetFromName(nsName)
	if err != nil {
		b.Fatal(err)
	}
	defer ns.Close()
	handle, err := netlink.NewHandleAt(ns)
	if err != nil {
		b.Fatal(err)
	}
	defer handle.Close()
	peer, err := handle.LinkByName("nw1")
	if err != nil {
		b.Fatal(err)
	}

	cfg := benchConfig()
	cfg.Network.Enabled, cfg.Network.Family = true, "ipv4"
	runHealth(b, daemon.Config{RestConfig: cp.Config(), NodeName: node, Health: &daemon.HealthConfig{Conditions: cfg,
		NetworkOptions: []conditions.NetworkOption{conditions.InNetworkNamespace(ns)}}})
	changes := taintWatcher(b, cp.Client(), node, "nodeward.io/network-unavailable")
	report(b, taintLatencies(b, changes, func() (cause, undo func()) {
		return func() {
				if err := handle.LinkSetDown(peer); err != nil {
					b.Fatal(err)
				}
			}, func() {
				if err := handle.LinkSetUp(peer); err != nil {
					b.Fatal(err)
				}
			}
	}))
}

// BenchmarkDiskDetectionToTaint: a 4 MiB tmpfs filled to 75% against a 50%
// threshold, polled every second → nodeward.io/disk-pressure visible.
func BenchmarkDiskDetectionToTaint(b *testing.B) {
	testenv.RequireRoot(b)
	cp := env.ControlPlane(b)
	ensureLeaseNamespace(b, cp.Client())
	node := cp.CreateNodes(b, cluster.NodeSpec{Prefix: "bench-disk", Count: 1})[0]
	mnt := b.TempDir()
	if err := unix.Mount("tmpfs", mnt, "tmpfs", 0, "size=4m"); err != nil {
		b.Fatal(err)
	}
	b.Cleanup(func() { unix.Unmount(mnt, unix.MNT_DETACH) })
	cfg := benchConfig()
	cfg.Disk.Enabled, cfg.Disk.Paths, cfg.Disk.MinAvailablePercent = true, []string{mnt}, 50
	cfg.Disk.PollInterval.Duration = time.Second
	runHealth(b, daemon.Config{RestConfig: cp.Config(), NodeName: node, Health: &daemon.HealthConfig{Conditions: cfg}})
	changes := taintWatcher(b, cp.Client(), node, "nodeward.io/disk-pressure")
	big := mnt + "/big"
	report(b, taintLatencies(b, changes, func() (cause, undo func()) {
		// A random phase against the poll, as a real disk fills.
		time.Sleep(time.Duration(rand.Int64N(int64(cfg.Disk.PollInterval.Duration))))
		return func() {
			if err := os.WriteFile(big, make([]byte, 3<<20), 0o600); err != nil {
				b.Fatal(err)
			}
		}, func() { os.Remove(big) }
	}))
}
