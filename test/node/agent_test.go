package node_test

import (
	"context"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	policyv1 "k8s.io/api/policy/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/apimachinery/pkg/util/wait"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/rest"

	"github.com/nodeward/nodeward/test/cluster"
	"github.com/nodeward/nodeward/test/node"
)

const agentNamespace = "nodeward-system"

// nodewardConditions are the five health conditions the agent publishes.
func nodewardConditions() []corev1.NodeConditionType {
	return []corev1.NodeConditionType{"NodewardMemoryPressure", "NodewardDiskPressure",
		"NodewardPIDPressure", "NodewardNetworkUnavailable", "NodewardRuntimeUnavailable"}
}

// TestAgentOnRealNode deploys the project's manifests with the image `make
// image` builds on the real node and checks, in order: the agent pod Running
// and Ready, the node's five conditions, the agent's log read by `nodeward
// must-gather`, the pod-bound token's limits, a
// drain of a real pod by `nodeward drain`, the runtime condition through
// a containerd restart, a target staged by the host's rpm-ostree run
// chrooted into /host, and the Helm chart's DaemonSet in place of the
// kustomize one.
func TestAgentOnRealNode(t *testing.T) {
	cp, n := env.Node(t)
	ctx, cancel := context.WithTimeout(context.Background(), 12*time.Minute)
	defer cancel()
	client := cp.Client()

	d := agentDeployment(ctx, t, cp, n)
	tag := d.image
	manifests, err := d.render(ctx, cp, env.Root())
	if err != nil {
		t.Fatal(err)
	}
	start := time.Now()
	if err := apply(ctx, cp, manifests, env.Dir()); err != nil {
		t.Fatal(err)
	}
	pod, err := waitAgentReady(ctx, client, n.Name(), 3*time.Minute)
	if err != nil {
		t.Fatal(err)
	}
	t.Logf("agent pod %s Running and Ready %s after apply (image %s)", pod.Name, time.Since(start).Round(time.Millisecond), pod.Status.ContainerStatuses[0].ImageID)
	if got := pod.Spec.Containers[0].Image; got != tag {
		t.Errorf("agent image %q, want %q", got, tag)
	}

	t.Run("conditions", func(t *testing.T) {
		err := waitNode(ctx, client, n.Name(), time.Minute, func(node *corev1.Node) error {
			for _, want := range nodewardConditions() {
				if condition(node, want) == nil {
					return fmt.Errorf("no %s", want)
				}
			}
			return nil
		})
		if err != nil {
			t.Fatal(err)
		}
		t.Logf("five Nodeward conditions %s after apply", time.Since(start).Round(time.Millisecond))
	})
	t.Run("metrics-auth", func(t *testing.T) { testMetricsAuth(ctx, t, cp, pod) })
	t.Run("must-gather-logs", func(t *testing.T) { testMustGatherLogs(t, cp, pod) })
	t.Run("bound-token", func(t *testing.T) { testBoundToken(ctx, t, cp, n, pod) })
	t.Run("drain", func(t *testing.T) { testDrain(ctx, t, cp, n, "drain-test") })
	t.Run("runtime-restart", func(t *testing.T) { testRuntimeRestart(ctx, t, client, n) })
	t.Run("host-rpm-ostree", func(t *testing.T) { testHostRpmOstree(ctx, t, client, n) })
	t.Run("helm-chart", func(t *testing.T) { testHelmChart(ctx, t, cp, n, d) })
}

var (
	agentOnce      sync.Once
	agentDeploy    deployment
	errAgentDeploy = errors.New("building or importing the agent's image failed in an earlier test")
	agentDeployErr error
)

// agentDeployment builds the image `make image` makes, imports it into the
// node and installs the host's rpm-ostree double, once per package, and
// returns how the tests adapt the manifests to this cluster.
func agentDeployment(ctx context.Context, t *testing.T, cp *cluster.ControlPlane, n *node.Node) deployment {
	t.Helper()
	agentOnce.Do(func() {
		agentDeployErr = errAgentDeploy // a t.Fatal below leaves it set
		start := time.Now()
		tag, digest, err := node.BuildImage(ctx, env.Root(), "localhost/nodeward", filepath.Join(env.Dir(), "nodeward.oci.tar"))
		if err != nil {
			t.Fatal(err)
		}
		if err := n.ImportImage(ctx, filepath.Join(env.Dir(), "nodeward.oci.tar")); err != nil {
			t.Fatal(err)
		}
		t.Logf("image %s %s built and imported in %s", tag, digest, time.Since(start).Round(time.Millisecond))
		host, port, err := splitHost(cp.Config().Host)
		if err != nil {
			t.Fatal(err)
		}
		missing, err := missingCapabilities()
		if err != nil {
			t.Fatal(err)
		}
		if len(missing) > 0 {
			t.Logf("this machine cannot grant %v: the agent runs without them", missing)
		}
		agentDeploy = deployment{image: tag, apiHost: host, apiPort: port, missing: missing, agentArgs: installHostDouble(t, n)}
		agentDeployErr = nil
	})
	if agentDeployErr != nil {
		t.Fatal(agentDeployErr)
	}
	return agentDeploy
}

// testHelmChart replaces the kustomize install's DaemonSet with the Helm
// chart's (rendered by Helm's engine, applied over the same objects): the
// chart's agent pod runs and is Ready on the real node.
func testHelmChart(ctx context.Context, t *testing.T, cp *cluster.ControlPlane, n *node.Node, d deployment) {
	client := cp.Client()
	manifests, err := d.renderChart(ctx, env.Root())
	if err != nil {
		t.Fatal(err)
	}
	if err := deleteAgentDaemonSet(ctx, client); err != nil {
		t.Fatalf("the kustomize install's DaemonSet: %v", err)
	}
	start := time.Now()
	if err := apply(ctx, cp, manifests, t.TempDir()); err != nil {
		t.Fatal(err)
	}
	pod, err := waitAgentReady(ctx, client, n.Name(), 3*time.Minute)
	if err != nil {
		t.Fatal(err)
	}
	if got := pod.Labels["app.kubernetes.io/managed-by"]; got != "Helm" {
		t.Errorf("agent pod %s labelled managed-by %q, want Helm (the chart's DaemonSet)", pod.Name, got)
	}
	t.Logf("the chart's agent pod %s Running and Ready %s after apply", pod.Name, time.Since(start).Round(time.Millisecond))
}

// testBoundToken reads the agent pod's projected token from the kubelet's
// volume on the node and checks what it may write: its own Node's agent
// annotations yes, another Node no (the project's admission policy).
func testBoundToken(ctx context.Context, t *testing.T, cp *cluster.ControlPlane, n *node.Node, pod *corev1.Pod) {
	var volume string
	for _, v := range pod.Spec.Volumes {
		if v.Projected != nil && strings.HasPrefix(v.Name, "kube-api-access-") {
			volume = v.Name
		}
	}
	path := n.HostPath(filepath.Join("/var/lib/kubelet/pods", string(pod.UID), "volumes/kubernetes.io~projected", volume, "token"))
	token, err := os.ReadFile(path)
	if err != nil {
		t.Fatalf("read the agent's projected token: %v", err)
	}
	cfg := &rest.Config{Host: cp.Config().Host, BearerToken: string(token), TLSClientConfig: rest.TLSClientConfig{CAData: cp.CACertPEM()}}
	agent, err := kubernetes.NewForConfig(cfg)
	if err != nil {
		t.Fatal(err)
	}
	other := &corev1.Node{ObjectMeta: metav1.ObjectMeta{Name: "other-node-" + n.Name()}}
	if _, err := cp.Client().CoreV1().Nodes().Create(ctx, other, metav1.CreateOptions{}); err != nil {
		t.Fatalf("create another node: %v", err)
	}
	defer cp.Client().CoreV1().Nodes().Delete(context.Background(), other.Name, metav1.DeleteOptions{})
	patch := []byte(`{"metadata":{"annotations":{"update.nodeward.io/reason":"bound-token test"}}}`)
	if _, err := agent.CoreV1().Nodes().Patch(ctx, n.Name(), types.MergePatchType, patch, metav1.PatchOptions{}); err != nil {
		t.Errorf("the agent's token may not patch its own node's annotation: %v", err)
	}
	_, err = agent.CoreV1().Nodes().Patch(ctx, other.Name, types.MergePatchType, patch, metav1.PatchOptions{})
	if err == nil || !(apierrors.IsForbidden(err) || apierrors.IsInvalid(err)) {
		t.Errorf("the agent's token patched another node: err = %v", err)
	} else {
		t.Logf("another node refused: %v", err)
	}

	// A pod bound to the other node (no kubelet runs it; binding is
	// enough for the policy): the agent's token may not evict it.
	elsewhere := &corev1.Pod{ObjectMeta: metav1.ObjectMeta{Name: "elsewhere", Namespace: metav1.NamespaceDefault},
		Spec: corev1.PodSpec{NodeName: other.Name, Containers: []corev1.Container{{Name: "c", Image: "registry.invalid/none:1"}}}}
	if _, err := cp.Client().CoreV1().Pods(elsewhere.Namespace).Create(ctx, elsewhere, metav1.CreateOptions{}); err != nil {
		t.Fatalf("create a pod bound to another node: %v", err)
	}
	defer cp.Client().CoreV1().Pods(elsewhere.Namespace).Delete(context.Background(), elsewhere.Name, metav1.DeleteOptions{})
	// The policy reads pods through the API server's parameter informer,
	// so a pod bound milliseconds before may not be among them yet
	// (docs/install.md): wait, with dry-run evictions that delete nothing,
	// until the policy sees it, then evict for real.
	cluster.WaitFor(t, 30*time.Second, "the eviction policy to see the pod bound elsewhere", func(ctx context.Context) (bool, error) {
		err := agent.PolicyV1().Evictions(elsewhere.Namespace).Evict(ctx, &policyv1.Eviction{
			ObjectMeta:    metav1.ObjectMeta{Name: elsewhere.Name, Namespace: elsewhere.Namespace},
			DeleteOptions: &metav1.DeleteOptions{DryRun: []string{metav1.DryRunAll}}})
		return apierrors.IsForbidden(err) || apierrors.IsInvalid(err), nil
	})
	err = agent.PolicyV1().Evictions(elsewhere.Namespace).Evict(ctx, &policyv1.Eviction{
		ObjectMeta: metav1.ObjectMeta{Name: elsewhere.Name, Namespace: elsewhere.Namespace}})
	if err == nil || !(apierrors.IsForbidden(err) || apierrors.IsInvalid(err)) {
		t.Errorf("the agent's token evicted a pod bound to another node: err = %v", err)
	} else {
		t.Logf("eviction elsewhere refused: %v", err)
	}
}

// testDrain runs a ReplicaSet's pod on the node, in a new namespace, and
// drains the node with the nodeward CLI; the pod goes away, and the node is
// uncordoned after.
func testDrain(ctx context.Context, t *testing.T, cp *cluster.ControlPlane, n *node.Node, namespace string) {
	client := cp.Client()
	ns := &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: namespace}}
	if _, err := client.CoreV1().Namespaces().Create(ctx, ns, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	rs := workloadReplicaSet(ns.Name, n.Name())
	if _, err := client.AppsV1().ReplicaSets(ns.Name).Create(ctx, rs, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	var running string
	err := wait.PollUntilContextTimeout(ctx, 200*time.Millisecond, 2*time.Minute, true, func(ctx context.Context) (bool, error) {
		pods, err := client.CoreV1().Pods(ns.Name).List(ctx, metav1.ListOptions{})
		if err != nil || len(pods.Items) == 0 {
			return false, nil
		}
		running = pods.Items[0].Name
		return pods.Items[0].Status.Phase == corev1.PodRunning, nil
	})
	if err != nil {
		t.Fatalf("workload pod never Running on the real node: %v", err)
	}
	nodeward, err := cluster.NodewardBinary(cluster.ReleaseBuild)
	if err != nil {
		t.Fatal(err)
	}
	defer func() {
		if out, err := exec.Command(nodeward, "uncordon", "--kubeconfig", cp.KubeconfigPath(), n.Name()).CombinedOutput(); err != nil {
			t.Logf("uncordon: %v: %s", err, out)
		}
	}()
	out, err := exec.CommandContext(ctx, nodeward, "drain", "--kubeconfig", cp.KubeconfigPath(), "--timeout", "2m", n.Name()).CombinedOutput()
	if err != nil {
		t.Fatalf("nodeward drain: %v\n%s", err, out)
	}
	t.Logf("nodeward drain:\n%s", out)
	err = wait.PollUntilContextTimeout(ctx, 200*time.Millisecond, time.Minute, true, func(ctx context.Context) (bool, error) {
		_, err := client.CoreV1().Pods(ns.Name).Get(ctx, running, metav1.GetOptions{})
		return apierrors.IsNotFound(err), nil
	})
	if err != nil {
		t.Fatalf("drained pod %s still there: %v", running, err)
	}
}

// testRuntimeRestart stops containerd, then starts it again: the agent's
// runtime probe must see the runtime go (NodewardRuntimeUnavailable True)
// and come back (False). With the runtime socket mounted as a file
// (hostPath type Socket) the pod kept the old, deleted socket and the
// condition never cleared (issue 17, finding 1); the socket's directory is
// mounted now.
func testRuntimeRestart(ctx context.Context, t *testing.T, client kubernetes.Interface, n *node.Node) {
	start := time.Now()
	n.StopRuntime()
	runtime := corev1.NodeConditionType("NodewardRuntimeUnavailable")
	if err := waitNode(ctx, client, n.Name(), 90*time.Second, conditionIs(runtime, corev1.ConditionTrue)); err != nil {
		t.Fatalf("with containerd stopped: %v", err)
	}
	t.Logf("%s True %s after containerd stopped", runtime, time.Since(start).Round(time.Millisecond))
	start = time.Now()
	if err := n.StartRuntime(ctx); err != nil {
		t.Fatal(err)
	}
	if err := waitNode(ctx, client, n.Name(), 2*time.Minute, conditionIs(runtime, corev1.ConditionFalse)); err != nil {
		t.Fatalf("containerd is back but the agent still reports it unavailable: %v", err)
	}
	t.Logf("%s False again %s after containerd started", runtime, time.Since(start).Round(time.Millisecond))
}
