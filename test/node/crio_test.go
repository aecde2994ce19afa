package node_test

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/wait"
	"k8s.io/client-go/kubernetes"

	"github.com/nodeward/nodeward/test/cluster"
	"github.com/nodeward/nodeward/test/node"
)

// TestCRIONode: a kubelet on CRI-O (built by test/tools from the Go
// module, run privately with Debian's conmon and runc) registers its Node
// Ready with CRI-O as the runtime the Node reports, and a hostNetwork pod
// of the pause image side-loaded into CRI-O's storage runs and is Ready,
// its container CRI-O's.
func TestCRIONode(t *testing.T) {
	start := time.Now()
	cp, n := env.CRIONode(t)
	t.Logf("CRI-O node %s Ready %s after the test started", n.Name(), time.Since(start).Round(time.Millisecond))
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
	defer cancel()
	client := cp.Client()
	got, err := client.CoreV1().Nodes().Get(ctx, n.Name(), metav1.GetOptions{})
	if err != nil {
		t.Fatalf("get node: %v", err)
	}
	if v := got.Status.NodeInfo.ContainerRuntimeVersion; !strings.HasPrefix(v, "cri-o://1.34.") {
		t.Errorf("container runtime %q, want cri-o://1.34.*", v)
	}
	if err := conditionIs(corev1.NodeReady, corev1.ConditionTrue)(got); err != nil {
		t.Error(err)
	}

	ns := &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{GenerateName: "crio-"}}
	if ns, err = client.CoreV1().Namespaces().Create(ctx, ns, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	defer client.CoreV1().Namespaces().Delete(context.Background(), ns.Name, metav1.DeleteOptions{})
	start = time.Now()
	pod, err := client.CoreV1().Pods(ns.Name).Create(ctx, pausePod(n.Name()), metav1.CreateOptions{})
	if err != nil {
		t.Fatal(err)
	}
	if pod, err = waitPodReady(ctx, client.CoreV1().Pods(ns.Name).Get, pod.Name, 2*time.Minute); err != nil {
		t.Fatal(err)
	}
	t.Logf("pod %s Ready on CRI-O %s after create (container %s, image %s)", pod.Name, time.Since(start).Round(time.Millisecond),
		pod.Status.ContainerStatuses[0].ContainerID, pod.Status.ContainerStatuses[0].ImageID)
	if id := pod.Status.ContainerStatuses[0].ContainerID; !strings.HasPrefix(id, "cri-o://") {
		t.Errorf("container ID %q, want a cri-o:// one", id)
	}
}

// pausePod is one hostNetwork container of the pause image on nodeName
// (CRI-O's network here is loopback alone, as containerd's), never pulled.
func pausePod(nodeName string) *corev1.Pod {
	grace := int64(5)
	return &corev1.Pod{
		ObjectMeta: metav1.ObjectMeta{Name: "pause"},
		Spec: corev1.PodSpec{
			NodeName:                      nodeName,
			HostNetwork:                   true,
			TerminationGracePeriodSeconds: &grace,
			AutomountServiceAccountToken:  new(bool),
			Containers: []corev1.Container{{
				Name: "pause", Image: node.SandboxImage, ImagePullPolicy: corev1.PullNever,
			}},
		},
	}
}

// waitPodReady waits until the pod is Running with its Ready condition
// True.
func waitPodReady(ctx context.Context, get func(context.Context, string, metav1.GetOptions) (*corev1.Pod, error), name string, timeout time.Duration) (*corev1.Pod, error) {
	var pod *corev1.Pod
	var last string
	err := wait.PollUntilContextTimeout(ctx, 200*time.Millisecond, timeout, true, func(ctx context.Context) (bool, error) {
		p, err := get(ctx, name, metav1.GetOptions{})
		if err != nil {
			last = err.Error()
			return false, nil
		}
		pod, last = p, fmt.Sprintf("phase %s, conditions %+v, containers %+v", p.Status.Phase, p.Status.Conditions, p.Status.ContainerStatuses)
		for _, c := range p.Status.Conditions {
			if c.Type == corev1.PodReady {
				return p.Status.Phase == corev1.PodRunning && c.Status == corev1.ConditionTrue, nil
			}
		}
		return false, nil
	})
	if err != nil {
		return nil, fmt.Errorf("waiting for pod %s Running and Ready: %w; last: %s", name, err, last)
	}
	return pod, nil
}

// TestCRIONodeAgentRuntime runs `nodeward agent` (health only) as a host
// program of the CRI-O node, with no runtime endpoint configured: it finds
// CRI-O's socket on its own (the node has no containerd), reports the
// runtime ready, then NodewardRuntimeUnavailable True with its taint while
// CRI-O is stopped, and False without the taint once CRI-O is back.
func TestCRIONodeAgentRuntime(t *testing.T) {
	cp, n := env.CRIONode(t)
	ctx, cancel := context.WithTimeout(context.Background(), 6*time.Minute)
	defer cancel()
	client := cp.Client()
	agent := startHostAgent(t, cp, n)
	defer agent.Stop(10 * time.Second)

	if err := waitNode(ctx, client, n.Name(), 2*time.Minute, crioRuntimeFound); err != nil {
		t.Fatalf("the agent never found CRI-O: %v (agent log %s)", err, agent.LogPath())
	}
	testCRIORestart(ctx, t, client, n)
}

// runtimeUnavailable is the runtime probe's condition, and
// runtimeUnavailableTaint its NoSchedule taint.
const (
	runtimeUnavailable      = corev1.NodeConditionType("NodewardRuntimeUnavailable")
	runtimeUnavailableTaint = "nodeward.io/runtime-unavailable"
)

// crioRuntimeFound: the runtime condition False, from CRI-O's socket, and
// no taint.
func crioRuntimeFound(node *corev1.Node) error {
	if err := conditionIs(runtimeUnavailable, corev1.ConditionFalse)(node); err != nil {
		return err
	}
	if msg := condition(node, runtimeUnavailable).Message; !strings.Contains(msg, "cri-o") || !strings.Contains(msg, "unix:///run/crio/crio.sock") {
		return fmt.Errorf("%s False but not CRI-O's socket: %s", runtimeUnavailable, msg)
	}
	if hasTaint(node, runtimeUnavailableTaint) {
		return fmt.Errorf("taint %s still there", runtimeUnavailableTaint)
	}
	return nil
}

// runtimeDown: the runtime condition True, with its taint.
func runtimeDown(node *corev1.Node) error {
	if err := conditionIs(runtimeUnavailable, corev1.ConditionTrue)(node); err != nil {
		return err
	}
	if !hasTaint(node, runtimeUnavailableTaint) {
		return fmt.Errorf("no NoSchedule taint %s (taints %v)", runtimeUnavailableTaint, node.Spec.Taints)
	}
	return nil
}

// testCRIORestart stops CRI-O and starts it again under a running agent:
// the condition goes True with its taint, then False from CRI-O's socket
// without it (the probe dials afresh at every sample, so no connection to
// the old CRI-O outlives it).
func testCRIORestart(ctx context.Context, t *testing.T, client kubernetes.Interface, n *node.Node) {
	start := time.Now()
	n.StopRuntime()
	if err := waitNode(ctx, client, n.Name(), 90*time.Second, runtimeDown); err != nil {
		t.Fatalf("with CRI-O stopped: %v", err)
	}
	t.Logf("%s True and tainted %s after CRI-O stopped", runtimeUnavailable, time.Since(start).Round(time.Millisecond))
	start = time.Now()
	if err := n.StartRuntime(ctx); err != nil {
		t.Fatal(err)
	}
	if err := waitNode(ctx, client, n.Name(), 2*time.Minute, crioRuntimeFound); err != nil {
		t.Fatalf("CRI-O is back but the agent still reports it unavailable: %v", err)
	}
	t.Logf("%s False and untainted %s after CRI-O started", runtimeUnavailable, time.Since(start).Round(time.Millisecond))
}

// startHostAgent starts `make build`'s nodeward as a health-only agent in
// the node's namespace with the runtime probe alone (sampled every second,
// one bad sample turns the condition True, a quiet second clears it) and no
// runtime endpoint.
func startHostAgent(t testing.TB, cp *cluster.ControlPlane, n *node.Node) *cluster.Process {
	t.Helper()
	nodeward, err := cluster.NodewardBinary(cluster.ReleaseBuild)
	if err != nil {
		t.Fatal(err)
	}
	dir := t.TempDir()
	health := "hysteresis: {badSamples: 1, quietPeriod: 1s}\nheartbeatInterval: 10s\n" +
		"memory: {enabled: false}\ndisk: {enabled: false}\npids: {enabled: false}\nnetwork: {enabled: false}\n" +
		"kernel: {enabled: false}\nruntime: {enabled: true, pollInterval: 1s, timeout: 1s}\n"
	if err := os.WriteFile(filepath.Join(dir, "health.yaml"), []byte(health), 0o600); err != nil {
		t.Fatal(err)
	}
	p, err := n.Launch("agent", nodeward, "agent", "--kubeconfig", cp.KubeconfigPath(), "--node-name", n.Name(),
		"--updates=false", "--state-dir", filepath.Join(dir, "state"), "--config", filepath.Join(dir, "health.yaml"),
		"--metrics-address", "")
	if err != nil {
		t.Fatal(err)
	}
	return p
}

// TestCRIONodeDrain: `nodeward drain` evicts a ReplicaSet's real pod from
// the CRI-O node (CRI-O stops its container), as from the containerd node.
func TestCRIONodeDrain(t *testing.T) {
	cp, n := env.CRIONode(t)
	ctx, cancel := context.WithTimeout(context.Background(), 4*time.Minute)
	defer cancel()
	const namespace = "crio-drain-test"
	defer cp.Client().CoreV1().Namespaces().Delete(context.Background(), namespace, metav1.DeleteOptions{})
	testDrain(ctx, t, cp, n, namespace)
}
