package daemon

import (
	"context"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/nodeward/nodeward/daemon/health"
	"github.com/nodeward/nodeward/test/cluster"
	"github.com/nodeward/nodeward/test/kernelevents"
	"github.com/nodeward/nodeward/test/testenv"
)

// The agent's OOM-kill Events end to end: a real OOM kill in a memory
// cgroup laid out as the kubelet lays out a pod's (cgroupfs driver, under
// a kubepods root of the test's own) becomes a Warning Event on the Node
// naming the pod by namespace and name, read from the real API server.
func TestHealthOOMKillEvent(t *testing.T) {
	testenv.RequireRoot(t)
	const memory = "/sys/fs/cgroup/memory"
	_, err := os.Stat(filepath.Join(memory, "memory.oom_control"))
	testenv.Require(t, err == nil, "no cgroup v1 memory hierarchy at "+memory)
	kernelevents.Lock(t) // an OOM kill writes its report to the kernel log
	cp := env.ControlPlane(t)
	client := cp.Client()
	ensureLeaseNamespace(t, client)
	node := cp.CreateNodes(t, cluster.NodeSpec{Prefix: "health-oom", Count: 1})[0]
	ns := cp.Namespace(t)
	pod, err := client.CoreV1().Pods(ns).Create(context.Background(), &corev1.Pod{
		ObjectMeta: metav1.ObjectMeta{Name: "hungry"},
		Spec:       corev1.PodSpec{NodeName: node, Containers: []corev1.Container{{Name: "c", Image: "registry.invalid/hungry:1"}}},
	}, metav1.CreateOptions{})
	if err != nil {
		t.Fatal(err)
	}
	root := filepath.Join(memory, fmt.Sprintf("nodeward-oom-e2e-%d", os.Getpid()), "kubepods")
	container := filepath.Join(root, "burstable", "pod"+string(pod.UID), strings.Repeat("c0", 32))
	testenv.MakeCgroups(t, memory, container)
	if err := os.WriteFile(filepath.Join(container, "memory.limit_in_bytes"), []byte("16777216"), 0); err != nil {
		t.Fatal(err)
	}
	_ = os.WriteFile(filepath.Join(container, "memory.swappiness"), []byte("0"), 0)

	cfg := fixtureConfig(newFixtureHost(t).root)
	reg := prometheus.NewRegistry()
	h, err := New(Config{RestConfig: cp.Config(), NodeName: node, Registry: reg,
		Health: &HealthConfig{Conditions: cfg.Config, LeaseRenewInterval: cfg.LeaseRenewInterval.Duration,
			OOM: health.OOMConfig{Enabled: true, CgroupRoot: root}}})
	if err != nil {
		t.Fatal(err)
	}
	runAgent(t, h)
	waitNode(t, client, node, "the agent's first conditions", func(n *corev1.Node) bool { return len(n.Status.Conditions) > 0 })

	// A kill before the watcher reads a cgroup's counter is not reported
	// (it came before the agent): wait until it watches the four.
	cluster.WaitFor(t, 30*time.Second, "the four cgroups watched", func(context.Context) (bool, error) {
		families, err := reg.Gather()
		if err != nil {
			return false, err
		}
		for _, f := range families {
			if f.GetName() == "nodeward_oom_watched_cgroups" {
				return f.GetMetric()[0].GetGauge().GetValue() == 4, nil
			}
		}
		return false, nil
	})
	// tail keeps the last lines of /dev/zero, which has none: it grows
	// until the cgroup's limit, and the kernel kills it.
	hog := exec.Command("sh", "-c", "echo $$ > "+filepath.Join(container, "cgroup.procs")+" && exec tail /dev/zero")
	if err := hog.Start(); err != nil {
		t.Fatal(err)
	}
	err = hog.Wait()
	var exit *exec.ExitError
	if !errors.As(err, &exit) || exit.Sys().(syscall.WaitStatus).Signal() != syscall.SIGKILL {
		t.Fatalf("the hog ended with %v, not killed by the kernel", err)
	}
	want := ns + "/hungry (uid " + string(pod.UID) + ")"
	cluster.WaitFor(t, 30*time.Second, "an OOMKilling Warning Event on the node naming "+want, func(ctx context.Context) (bool, error) {
		evs, err := client.CoreV1().Events(metav1.NamespaceDefault).List(ctx, metav1.ListOptions{})
		if err != nil {
			return false, err
		}
		var seen []string
		for _, e := range evs.Items {
			if e.InvolvedObject.Name == node && e.Reason == "OOMKilling" && e.Type == corev1.EventTypeWarning && strings.Contains(e.Message, want) {
				return true, nil
			}
			if e.InvolvedObject.Name == node {
				seen = append(seen, e.Reason+": "+e.Message)
			}
		}
		return false, fmt.Errorf("the node's events: %q", seen)
	})
}
