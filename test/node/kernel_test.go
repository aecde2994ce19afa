package node_test

import (
	"bytes"
	"context"
	"fmt"
	"os"
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/client-go/kubernetes"

	"github.com/nodeward/nodeward/api/v1alpha1"
	"github.com/nodeward/nodeward/test/cluster"
	"github.com/nodeward/nodeward/test/kernelevents"
	"github.com/nodeward/nodeward/test/node"
)

// TestKernelEventsOnRealNode installs the Helm chart with
// agent.kernelLog.enabled and agent.oomKills.enabled on the real node and
// checks what the agent pod sees of the host's kernel:
//
//   - least-privilege: the chart's DaemonSet with its container made
//     unprivileged again, CAP_SYSLOG added and the host's /dev/kmsg still
//     mounted: the kernel log probe reports Unknown, KernelLogUnreadable,
//     "operation not permitted" (the runtime's device cgroup), which is why
//     the chart runs the container privileged for the kernel log; the OOM
//     kills need no privilege and are reported there already;
//   - the chart's DaemonSet as rendered: a real ext4 error on a loop device
//     (the kernel remounts it read-only) sets NodewardReadonlyFilesystem
//     True with its taint, and unmounting clears both; a real OOM kill in a
//     pod on the node is a Warning Event OOMKilling on the Node naming the
//     pod.
func TestKernelEventsOnRealNode(t *testing.T) {
	cp, n := env.Node(t)
	ctx, cancel := context.WithTimeout(context.Background(), 12*time.Minute)
	defer cancel()
	client := cp.Client()
	d := agentDeployment(ctx, t, cp, n)
	// The kernel log to this test: another test's ext4 error would be in
	// the agent's look-back, and a flood could overwrite this one's.
	kernelevents.Lock(t)

	start := time.Now()
	hog, err := node.BuildMemhog(ctx, env.Root(), env.Dir())
	if err != nil {
		t.Fatal(err)
	}
	if err := n.ImportImage(ctx, hog); err != nil {
		t.Fatal(err)
	}
	t.Logf("memhog image built and imported in %s", time.Since(start).Round(time.Millisecond))

	// The node's pods live under its own cgroup root (config.go), not
	// under one of the default kubepods cgroups: the value says where, as
	// the pod sees the host's cgroup filesystem.
	cgroupRoot := "/host" + n.KubepodsCgroup()
	manifests, err := d.renderChart(ctx, env.Root(),
		"agent.kernelLog.enabled=true", "agent.oomKills.enabled=true", "agent.oomKills.cgroupRoot="+cgroupRoot)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { removeAgent(t, client) })

	t.Run("least-privilege", func(t *testing.T) {
		reduced, err := editDaemonSet(manifests, func(c map[string]any) error {
			if err := unstructured.SetNestedField(c, false, "securityContext", "privileged"); err != nil {
				return err
			}
			if err := unstructured.SetNestedField(c, false, "securityContext", "allowPrivilegeEscalation"); err != nil {
				return err
			}
			add, _, _ := unstructured.NestedStringSlice(c, "securityContext", "capabilities", "add")
			return unstructured.SetNestedStringSlice(c, append(add, "SYSLOG"), "securityContext", "capabilities", "add")
		})
		if err != nil {
			t.Fatal(err)
		}
		pod := reinstallAgent(ctx, t, cp, n, reduced)
		if sc := pod.Spec.Containers[0].SecurityContext; sc.Privileged == nil || *sc.Privileged {
			t.Fatalf("agent pod %s privileged %v, want false", pod.Name, sc.Privileged)
		}
		cond := v1alpha1.ConditionReadonlyFilesystem
		var got *corev1.NodeCondition
		err = waitNode(ctx, client, n.Name(), time.Minute, func(node *corev1.Node) error {
			got = condition(node, cond)
			if got == nil || got.Status != corev1.ConditionUnknown || got.Reason != "KernelLogUnreadable" {
				return fmt.Errorf("%s: %+v", cond, got)
			}
			return nil
		})
		if err != nil {
			t.Fatalf("unprivileged with CAP_SYSLOG and the host's /dev/kmsg mounted, want the kernel log unreadable: %v", err)
		}
		if !strings.Contains(got.Message, "operation not permitted") {
			t.Errorf("%s Unknown for another reason than the device cgroup: %s", cond, got.Message)
		}
		t.Logf("unprivileged, CAP_SYSLOG, /dev/kmsg mounted: %s %s %s: %s", cond, got.Status, got.Reason, got.Message)
		// Why: on cgroup v1 the container's device cgroup, as runc set it,
		// allows runc's default devices and not /dev/kmsg (char 1:11).
		if devices, ok := containerDevices(t, n, pod); ok {
			t.Logf("the agent container's devices.list (runc's allowlist):\n%s", devices)
			if strings.Contains(devices, "a *:* rwm") || strings.Contains(devices, "c 1:11 ") {
				t.Errorf("the agent container's device cgroup allows /dev/kmsg: the refusal has another cause")
			}
		}
		testOOMKillEvent(ctx, t, client, n, "memhog-unprivileged")
	})

	t.Run("chart", func(t *testing.T) {
		pod := reinstallAgent(ctx, t, cp, n, manifests)
		if sc := pod.Spec.Containers[0].SecurityContext; sc.Privileged == nil || !*sc.Privileged {
			t.Fatalf("agent pod %s privileged %v, want true (agent.kernelLog.enabled)", pod.Name, sc.Privileged)
		}
		t.Run("readonly-filesystem", func(t *testing.T) { testReadonlyFilesystem(ctx, t, client, n) })
		t.Run("oom-kill", func(t *testing.T) { testOOMKillEvent(ctx, t, client, n, "memhog-privileged") })
	})
}

// testReadonlyFilesystem fails a real ext4 filesystem on a loop device of
// the host: the agent pod reads the kernel's record through the host's
// /dev/kmsg and the re-check finds the read-only mount in the host's
// mountinfo (/host/proc/1/mountinfo); unmounted, the condition and its
// taint go.
func testReadonlyFilesystem(ctx context.Context, t *testing.T, client kubernetes.Interface, n *node.Node) {
	cond := v1alpha1.ConditionReadonlyFilesystem
	taint := v1alpha1.GroupName + "/readonly-filesystem"
	// False first: the probe reads the log, and a problem of another
	// test in the look-back, whose mount is gone, has cleared.
	if err := waitNode(ctx, client, n.Name(), 90*time.Second, conditionIs(cond, corev1.ConditionFalse)); err != nil {
		t.Fatalf("the privileged agent pod does not read the kernel log: %v", err)
	}
	fs := kernelevents.NewExt4(t)
	start := time.Now()
	fs.Fail(t)
	err := waitNode(ctx, client, n.Name(), time.Minute, func(node *corev1.Node) error {
		c := condition(node, cond)
		if c == nil || c.Status != corev1.ConditionTrue || c.Reason != "FilesystemIsReadOnly" || !strings.Contains(c.Message, fs.Device) {
			return fmt.Errorf("%s: %+v", cond, c)
		}
		if !hasTaint(node, taint) {
			return fmt.Errorf("%s True but no taint %s", cond, taint)
		}
		return nil
	})
	if err != nil {
		t.Fatalf("after the kernel remounted %s read-only: %v", fs.Device, err)
	}
	t.Logf("%s True (FilesystemIsReadOnly, %s) with taint %s %s after the ext4 error", cond, fs.Device, taint, time.Since(start).Round(time.Millisecond))

	start = time.Now()
	fs.Unmount(t)
	err = waitNode(ctx, client, n.Name(), time.Minute, func(node *corev1.Node) error {
		if err := conditionIs(cond, corev1.ConditionFalse)(node); err != nil {
			return err
		}
		if hasTaint(node, taint) {
			return fmt.Errorf("%s False but taint %s still there", cond, taint)
		}
		return nil
	})
	if err != nil {
		t.Fatalf("after %s was unmounted: %v", fs.Device, err)
	}
	t.Logf("%s False and no taint %s after the unmount", cond, time.Since(start).Round(time.Millisecond))
}

// testOOMKillEvent runs a pod whose container allocates past its 32 MiB
// memory limit until the kernel kills it: the agent pod, watching the
// host's kubepods memory cgroups, sends a Warning Event OOMKilling on the
// Node naming the pod.
func testOOMKillEvent(ctx context.Context, t *testing.T, client kubernetes.Interface, n *node.Node, name string) {
	limit := resource.MustParse("32Mi")
	zero := int64(0)
	pod := &corev1.Pod{
		ObjectMeta: metav1.ObjectMeta{Name: name, Namespace: metav1.NamespaceDefault},
		Spec: corev1.PodSpec{
			// Bound to the node, on the host network (the node's CNI is
			// loopback alone, config.go), tolerating nodeward's taints.
			NodeName:                      n.Name(),
			HostNetwork:                   true,
			RestartPolicy:                 corev1.RestartPolicyNever,
			AutomountServiceAccountToken:  new(bool),
			TerminationGracePeriodSeconds: &zero,
			Tolerations:                   []corev1.Toleration{{Operator: corev1.TolerationOpExists}},
			Containers: []corev1.Container{{
				Name: "memhog", Image: node.MemhogImage, ImagePullPolicy: corev1.PullNever,
				Resources: corev1.ResourceRequirements{
					Requests: corev1.ResourceList{corev1.ResourceMemory: limit},
					Limits:   corev1.ResourceList{corev1.ResourceMemory: limit},
				},
			}},
		},
	}
	start := time.Now()
	created, err := client.CoreV1().Pods(pod.Namespace).Create(ctx, pod, metav1.CreateOptions{})
	if err != nil {
		t.Fatal(err)
	}
	defer client.CoreV1().Pods(pod.Namespace).Delete(context.Background(), pod.Name, metav1.DeleteOptions{GracePeriodSeconds: &zero})
	want := fmt.Sprintf("pod %s/%s (uid %s)", pod.Namespace, pod.Name, created.UID)
	var event *corev1.Event
	cluster.WaitFor(t, 2*time.Minute, "a Warning Event OOMKilling on the node naming "+want, func(ctx context.Context) (bool, error) {
		evs, err := client.CoreV1().Events(metav1.NamespaceDefault).List(ctx, metav1.ListOptions{})
		if err != nil {
			return false, err
		}
		for i, e := range evs.Items {
			if e.InvolvedObject.Kind == "Node" && e.InvolvedObject.Name == n.Name() && e.Reason == "OOMKilling" &&
				e.Type == corev1.EventTypeWarning && strings.Contains(e.Message, want) {
				event = &evs.Items[i]
				return true, nil
			}
		}
		return false, nil
	})
	t.Logf("Event %s %s %s after the pod was created: %s", event.Type, event.Reason, time.Since(start).Round(time.Millisecond), event.Message)
	// The kubelet's view of the same kill, for the log.
	if p, err := client.CoreV1().Pods(pod.Namespace).Get(ctx, pod.Name, metav1.GetOptions{}); err == nil {
		for _, s := range p.Status.ContainerStatuses {
			if s.State.Terminated != nil {
				t.Logf("container %s terminated: %s, exit code %d", s.Name, s.State.Terminated.Reason, s.State.Terminated.ExitCode)
			}
		}
	}
}

func hasTaint(n *corev1.Node, key string) bool {
	for _, t := range n.Spec.Taints {
		if t.Key == key && t.Effect == corev1.TaintEffectNoSchedule {
			return true
		}
	}
	return false
}

// editDaemonSet applies edit to the agent container of the DaemonSet in a
// manifest stream.
func editDaemonSet(manifests []byte, edit func(container map[string]any) error) ([]byte, error) {
	return eachObject(manifests, func(obj *unstructured.Unstructured) (bool, error) {
		if obj.GetKind() != "DaemonSet" || obj.GetName() != "nodeward-agent" {
			return true, nil
		}
		containers, _, err := unstructured.NestedSlice(obj.Object, "spec", "template", "spec", "containers")
		if err != nil {
			return false, err
		}
		for _, c := range containers {
			if c := c.(map[string]any); c["name"] == "agent" {
				if err := edit(c); err != nil {
					return false, err
				}
			}
		}
		return true, unstructured.SetNestedSlice(obj.Object, containers, "spec", "template", "spec", "containers")
	})
}

// reinstallAgent deletes the agent DaemonSet (and waits for its pod to
// go), applies manifests and returns the new agent pod once Ready.
func reinstallAgent(ctx context.Context, t *testing.T, cp *cluster.ControlPlane, n *node.Node, manifests []byte) *corev1.Pod {
	t.Helper()
	client := cp.Client()
	removeAgent(t, client)
	start := time.Now()
	// The Namespace first: the chart's objects come in its templates'
	// order, and the namespace of the ones before it may not exist yet.
	if err := apply(ctx, cp, namespacesFirst(manifests), t.TempDir()); err != nil {
		t.Fatal(err)
	}
	pod, err := waitAgentReady(ctx, client, n.Name(), 3*time.Minute)
	if err != nil {
		t.Fatal(err)
	}
	t.Logf("agent pod %s Running and Ready %s after apply", pod.Name, time.Since(start).Round(time.Millisecond))
	return pod
}

// removeAgent deletes the agent DaemonSet, if any, and waits until it and
// its pods are gone (foreground deletion).
func removeAgent(t testing.TB, client kubernetes.Interface) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	if err := deleteAgentDaemonSet(ctx, client); err != nil {
		t.Fatal(err)
	}
}

// namespacesFirst moves the Namespaces of a manifest stream to its front.
func namespacesFirst(manifests []byte) []byte {
	var first, rest [][]byte
	for _, doc := range bytes.Split(manifests, []byte("\n---\n")) {
		if bytes.Contains(doc, []byte("\nkind: Namespace\n")) || bytes.HasPrefix(doc, []byte("kind: Namespace\n")) {
			first = append(first, doc)
		} else {
			rest = append(rest, doc)
		}
	}
	return bytes.Join(append(first, rest...), []byte("\n---\n"))
}

// containerDevices reads the agent container's devices.list on the host,
// on cgroup v1 (the cgroupfs driver: <kubepods>/<qos>/pod<uid>/<id>); false
// on v2, where the device filter is an eBPF program.
func containerDevices(t *testing.T, n *node.Node, pod *corev1.Pod) (string, bool) {
	t.Helper()
	kubepods := n.KubepodsCgroup()
	if !strings.HasPrefix(kubepods, "/sys/fs/cgroup/memory/") || len(pod.Status.ContainerStatuses) == 0 {
		return "", false
	}
	dir := "/sys/fs/cgroup/devices/" + strings.TrimPrefix(kubepods, "/sys/fs/cgroup/memory/")
	if qos := strings.ToLower(string(pod.Status.QOSClass)); qos != "guaranteed" {
		dir += "/" + qos
	}
	_, id, _ := strings.Cut(pod.Status.ContainerStatuses[0].ContainerID, "://")
	data, err := os.ReadFile(dir + "/pod" + string(pod.UID) + "/" + id + "/devices.list")
	if err != nil {
		t.Logf("the agent container's device cgroup: %v", err)
		return "", false
	}
	return strings.TrimSpace(string(data)), true
}
