package machineapi_test

import (
	"context"
	"fmt"
	"os"
	"strings"
	"sync"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/fields"
	"k8s.io/apimachinery/pkg/watch"
	"k8s.io/utils/ptr"

	"github.com/nodeward/nodeward/test/cluster"
	"github.com/nodeward/nodeward/test/machineapi"
)

// One control plane for the package. The tests are not parallel: the
// controllers have no leader election and share openshift-machine-api.
var env cluster.Env

func TestMain(m *testing.M) { os.Exit(env.Run(m)) }

// adopt creates one kwok node and a Machine adopting it, and waits until
// the nodelink controller linked them and the Machine runs.
func adopt(t *testing.T, cp *cluster.ControlPlane, mapi *machineapi.Controllers, name string, hooks []machineapi.Hook) (node, uid string) {
	t.Helper()
	node = cp.CreateNodes(t, cluster.NodeSpec{Prefix: name, Count: 1, Role: "worker"})[0]
	mapi.CreateMachine(context.Background(), machineapi.MachineSpec{Name: name, Role: "worker", NodeName: node, PreDrainHooks: hooks})
	waitLinked(t, cp, mapi, name, node)
	m, err := mapi.Machine(context.Background(), name)
	if err != nil {
		t.Fatal(err)
	}
	return node, m.UID
}

// waitLinked waits until Machine name runs with status.nodeRef = node and
// the Node carries the nodelink controller's annotation back to it.
func waitLinked(t *testing.T, cp *cluster.ControlPlane, mapi *machineapi.Controllers, name, node string) {
	t.Helper()
	cluster.WaitFor(t, time.Minute, fmt.Sprintf("Machine %s Running and linked to node %s", name, node), func(ctx context.Context) (bool, error) {
		m, err := mapi.Machine(ctx, name)
		if err != nil {
			return false, err
		}
		n, err := cp.Client().CoreV1().Nodes().Get(ctx, node, metav1.GetOptions{})
		if err != nil {
			return false, err
		}
		want := machineapi.Namespace + "/" + name
		if m.Phase != "Running" || m.NodeRef != node || n.Annotations[machineapi.AnnotationMachine] != want {
			return false, fmt.Errorf("phase %q, nodeRef %q, node annotation %q", m.Phase, m.NodeRef, n.Annotations[machineapi.AnnotationMachine])
		}
		return true, nil
	})
}

// (a) A Machine adopting an existing kwok node is linked to it.
func TestMachineAdoptsNode(t *testing.T) {
	cp := env.ControlPlane(t)
	mapi := machineapi.Start(t, cp, machineapi.Options{})
	node, _ := adopt(t, cp, mapi, "adopt", nil)
	m, err := mapi.Machine(context.Background(), "adopt")
	if err != nil {
		t.Fatal(err)
	}
	if m.ProviderID != machineapi.ProviderIDPrefix+node {
		t.Errorf("Machine providerID %q, want %q", m.ProviderID, machineapi.ProviderIDPrefix+node)
	}
	if c := m.Condition("InstanceExists"); c == nil || c.Status != "True" {
		t.Errorf("InstanceExists condition %+v, want True", c)
	}
	if !strings.Contains(strings.Join(m.Object.GetFinalizers(), ","), "machine.machine.openshift.io") {
		t.Errorf("Machine finalizers %v: the machine controller did not take it", m.Object.GetFinalizers())
	}
}

// nodeHistory records, from a watch started before the deletion, whether a
// node was seen cordoned and when it was deleted, and when each pod of a
// namespace was deleted.
type nodeHistory struct {
	mu          sync.Mutex
	cordoned    bool
	nodeDeleted time.Time
	podDeleted  map[string]time.Time
}

func watchDeletion(t *testing.T, cp *cluster.ControlPlane, node, ns string) *nodeHistory {
	t.Helper()
	ctx, cancel := context.WithCancel(context.Background())
	t.Cleanup(cancel)
	h := &nodeHistory{podDeleted: map[string]time.Time{}}
	nw, err := cp.Client().CoreV1().Nodes().Watch(ctx, metav1.ListOptions{FieldSelector: fields.OneTermEqualSelector("metadata.name", node).String()})
	if err != nil {
		t.Fatal(err)
	}
	pw, err := cp.Client().CoreV1().Pods(ns).Watch(ctx, metav1.ListOptions{})
	if err != nil {
		t.Fatal(err)
	}
	go func() {
		for ev := range nw.ResultChan() {
			n, ok := ev.Object.(*corev1.Node)
			if !ok {
				continue
			}
			h.mu.Lock()
			if n.Spec.Unschedulable {
				h.cordoned = true
			}
			if ev.Type == watch.Deleted {
				h.nodeDeleted = time.Now()
			}
			h.mu.Unlock()
		}
	}()
	go func() {
		for ev := range pw.ResultChan() {
			if p, ok := ev.Object.(*corev1.Pod); ok && ev.Type == watch.Deleted {
				h.mu.Lock()
				h.podDeleted[p.Name] = time.Now()
				h.mu.Unlock()
			}
		}
	}()
	return h
}

// runPods starts count pods on node in ns (bypassing the scheduler) with a
// one-second grace period, and waits until they run.
func runPods(t *testing.T, cp *cluster.ControlPlane, ns, node string, count int) []string {
	t.Helper()
	ctx := context.Background()
	var names []string
	for i := range count {
		pod := &corev1.Pod{
			ObjectMeta: metav1.ObjectMeta{Name: fmt.Sprintf("work-%d", i), Namespace: ns},
			Spec: corev1.PodSpec{
				NodeName:                      node,
				TerminationGracePeriodSeconds: ptr.To[int64](1),
				Containers:                    []corev1.Container{{Name: "c", Image: "registry.invalid/pause"}},
			},
		}
		if _, err := cp.Client().CoreV1().Pods(ns).Create(ctx, pod, metav1.CreateOptions{}); err != nil {
			t.Fatal(err)
		}
		names = append(names, pod.Name)
	}
	cluster.WaitFor(t, time.Minute, fmt.Sprintf("%d pods running on %s", count, node), func(ctx context.Context) (bool, error) {
		list, err := cp.Client().CoreV1().Pods(ns).List(ctx, metav1.ListOptions{})
		if err != nil {
			return false, err
		}
		running := 0
		for _, p := range list.Items {
			if p.Status.Phase == corev1.PodRunning {
				running++
			}
		}
		return running == count, nil
	})
	return names
}

// machineEvent reports whether an Event of reason was recorded for the
// Machine of uid (not an earlier one of the same name).
func machineEvent(ctx context.Context, cp *cluster.ControlPlane, uid, reason string) (bool, error) {
	list, err := cp.Client().CoreV1().Events(machineapi.Namespace).List(ctx, metav1.ListOptions{
		FieldSelector: fields.AndSelectors(
			fields.OneTermEqualSelector("involvedObject.kind", "Machine"),
			fields.OneTermEqualSelector("involvedObject.uid", uid),
			fields.OneTermEqualSelector("reason", reason),
		).String()})
	if err != nil {
		return false, err
	}
	return len(list.Items) > 0, nil
}

// waitGone waits until Machine name and its Node are deleted.
func waitGone(t *testing.T, cp *cluster.ControlPlane, mapi *machineapi.Controllers, name, node string, timeout time.Duration) {
	t.Helper()
	cluster.WaitFor(t, timeout, fmt.Sprintf("Machine %s and node %s deleted", name, node), func(ctx context.Context) (bool, error) {
		_, err := cp.Client().CoreV1().Nodes().Get(ctx, node, metav1.GetOptions{})
		if !apierrors.IsNotFound(err) {
			return false, fmt.Errorf("node: %v", err)
		}
		m, err := mapi.Machine(ctx, name)
		if apierrors.IsNotFound(err) {
			return true, nil
		}
		if err != nil {
			return false, err
		}
		return false, fmt.Errorf("machine phase %q, conditions %+v", m.Phase, m.Conditions)
	})
}

// (b) Deleting a Machine: the drain controller cordons and drains its node,
// then the machine controller deletes the Node and the Machine goes away.
func TestDeleteMachineDrainsAndDeletesNode(t *testing.T) {
	cp := env.ControlPlane(t)
	ns := cp.Namespace(t)
	mapi := machineapi.Start(t, cp, machineapi.Options{})
	node, uid := adopt(t, cp, mapi, "delete", nil)
	pods := runPods(t, cp, ns, node, 2)
	h := watchDeletion(t, cp, node, ns)

	mapi.DeleteMachine(context.Background(), "delete")
	waitGone(t, cp, mapi, "delete", node, 2*time.Minute)

	cluster.WaitFor(t, 10*time.Second, "the node's deletion seen by the watch", func(context.Context) (bool, error) {
		h.mu.Lock()
		defer h.mu.Unlock()
		return !h.nodeDeleted.IsZero(), nil
	})
	h.mu.Lock()
	defer h.mu.Unlock()
	if !h.cordoned {
		t.Errorf("node %s was never seen cordoned before its deletion", node)
	}
	for _, p := range pods {
		at, ok := h.podDeleted[p]
		if !ok || !at.Before(h.nodeDeleted) {
			t.Errorf("pod %s not deleted before node %s (deleted %v at %v, node at %v): not drained", p, node, ok, at, h.nodeDeleted)
		}
	}
	ok, err := machineEvent(context.Background(), cp, uid, "DrainSucceeded")
	if err != nil || !ok {
		t.Errorf("no DrainSucceeded event for Machine delete (%v)", err)
	}
}

// (c) A preDrain lifecycle hook holds the drain: the deleting Machine's
// Drainable condition is False naming the hook, the node stays schedulable
// with its pods, until the hook is removed; then drain and deletion proceed.
func TestPreDrainHookHoldsDrain(t *testing.T) {
	cp := env.ControlPlane(t)
	ns := cp.Namespace(t)
	mapi := machineapi.Start(t, cp, machineapi.Options{})
	hook := machineapi.Hook{Name: "nodeward.io/Drain", Owner: "nodeward-coordinator"}
	node, uid := adopt(t, cp, mapi, "hooked", []machineapi.Hook{hook})
	pods := runPods(t, cp, ns, node, 1)
	ctx := context.Background()

	mapi.DeleteMachine(ctx, "hooked")
	cluster.WaitFor(t, time.Minute, "Machine hooked Deleting, Drainable=False naming the hook, drain blocked", func(ctx context.Context) (bool, error) {
		m, err := mapi.Machine(ctx, "hooked")
		if err != nil {
			return false, err
		}
		c := m.Condition("Drainable")
		if m.DeletionTimestamp == nil || m.Phase != "Deleting" || c == nil || c.Status != "False" ||
			c.Reason != "HookPresent" || !strings.Contains(c.Message, hook.Name) {
			return false, fmt.Errorf("phase %q, deleting %v, Drainable %+v", m.Phase, m.DeletionTimestamp != nil, c)
		}
		// The drain controller looked at it and held off.
		return machineEvent(ctx, cp, uid, "DrainBlocked")
	})
	n, err := cp.Client().CoreV1().Nodes().Get(ctx, node, metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	if n.Spec.Unschedulable {
		t.Fatalf("node %s cordoned while the preDrain hook is present", node)
	}
	p, err := cp.Client().CoreV1().Pods(ns).Get(ctx, pods[0], metav1.GetOptions{})
	if err != nil || p.DeletionTimestamp != nil {
		t.Fatalf("pod %s evicted while the preDrain hook is present (%v)", pods[0], err)
	}
	if ok, _ := machineEvent(ctx, cp, uid, "DrainProceeds"); ok {
		t.Fatal("the drain proceeded while the preDrain hook is present")
	}

	h := watchDeletion(t, cp, node, ns)
	mapi.SetLifecycleHooks(ctx, "hooked", nil, nil)
	waitGone(t, cp, mapi, "hooked", node, 2*time.Minute)
	cluster.WaitFor(t, 10*time.Second, "the node's deletion seen by the watch", func(context.Context) (bool, error) {
		h.mu.Lock()
		defer h.mu.Unlock()
		return !h.nodeDeleted.IsZero(), nil
	})
	h.mu.Lock()
	defer h.mu.Unlock()
	if !h.cordoned {
		t.Errorf("node %s never seen cordoned after the hook's removal", node)
	}
	if at, ok := h.podDeleted[pods[0]]; !ok || !at.Before(h.nodeDeleted) {
		t.Errorf("pod %s not drained before the node's deletion", pods[0])
	}
}

// (d) Scaling a MachineSet from 1 to 2 creates a Machine whose stub Node
// becomes Ready and is linked.
func TestMachineSetScaleUp(t *testing.T) {
	cp := env.ControlPlane(t)
	mapi := machineapi.Start(t, cp, machineapi.Options{})
	ctx := context.Background()
	mapi.CreateMachineSet(ctx, machineapi.MachineSetSpec{Name: "workers", Replicas: 1, Role: "worker"})
	first := waitMachineSet(t, cp, mapi, "workers", 2*time.Minute, 1)

	mapi.ScaleMachineSet(ctx, "workers", 2)
	both := waitMachineSet(t, cp, mapi, "workers", 2*time.Minute, 2)
	for m := range first {
		if both[m] == "" {
			t.Errorf("the first Machine %s was replaced: %v", m, both)
		}
	}
	cluster.WaitFor(t, time.Minute, "MachineSet workers readyReplicas 2", func(ctx context.Context) (bool, error) {
		ms, err := mapi.Dynamic.Resource(machineapi.MachineSetResource).Namespace(machineapi.Namespace).Get(ctx, "workers", metav1.GetOptions{})
		if err != nil {
			return false, err
		}
		ready, _, _ := unstructured.NestedInt64(ms.Object, "status", "readyReplicas")
		return ready == 2, fmt.Errorf("readyReplicas %d", ready)
	})
}

// waitMachineSet waits until a MachineSet has count Machines, each Running
// and linked to a Ready Node labelled with the group; it returns the
// Machines' names mapped to their Nodes.
func waitMachineSet(t testing.TB, cp *cluster.ControlPlane, mapi *machineapi.Controllers, name string, timeout time.Duration, count int) map[string]string {
	t.Helper()
	var out map[string]string
	cluster.WaitFor(t, timeout, fmt.Sprintf("MachineSet %s: %d Machines Running on Ready nodes", name, count), func(ctx context.Context) (bool, error) {
		ms, err := mapi.Machines(ctx, machineapi.MachineSetSelector(name))
		if err != nil {
			return false, err
		}
		if len(ms) != count {
			return false, fmt.Errorf("%d Machines", len(ms))
		}
		got := map[string]string{}
		for _, m := range ms {
			if m.Phase != "Running" || m.NodeRef == "" || m.MachineSet != name {
				return false, fmt.Errorf("machine %s: phase %q, nodeRef %q, owner %q", m.Name, m.Phase, m.NodeRef, m.MachineSet)
			}
			n, err := cp.Client().CoreV1().Nodes().Get(ctx, m.NodeRef, metav1.GetOptions{})
			if err != nil {
				return false, err
			}
			if !cluster.NodeReady(n) || n.Labels[cluster.GroupLabel] != name || n.Annotations[machineapi.AnnotationMachine] != machineapi.Namespace+"/"+m.Name {
				return false, fmt.Errorf("node %s: ready %v, labels %v, annotations %v", n.Name, cluster.NodeReady(n), n.Labels, n.Annotations)
			}
			got[m.Name] = n.Name
		}
		out = got
		return true, nil
	})
	return out
}

// The stub's knobs: a slow Create keeps a Machine Provisioning (a
// replacement still provisioning) until it runs; a failing Create makes it
// Failed; no node leaves it Provisioned without a nodeRef.
func TestStubProvisioningAndFailure(t *testing.T) {
	cp := env.ControlPlane(t)
	mapi := machineapi.Start(t, cp, machineapi.Options{})
	ctx := context.Background()
	mapi.CreateMachine(ctx, machineapi.MachineSpec{Name: "slow", Role: "worker", CreateDelay: 5 * time.Second})
	mapi.CreateMachine(ctx, machineapi.MachineSpec{Name: "broken", Role: "worker", CreateError: "no capacity in zone-a"})
	mapi.CreateMachine(ctx, machineapi.MachineSpec{Name: "nonode", Role: "worker", NoNode: true})

	cluster.WaitFor(t, 30*time.Second, "Machine slow Provisioning without a providerID", func(ctx context.Context) (bool, error) {
		m, err := mapi.Machine(ctx, "slow")
		if err != nil {
			return false, err
		}
		return m.Phase == "Provisioning" && m.ProviderID == "", fmt.Errorf("phase %q, providerID %q", m.Phase, m.ProviderID)
	})
	cluster.WaitFor(t, time.Minute, "Machine broken Failed", func(ctx context.Context) (bool, error) {
		m, err := mapi.Machine(ctx, "broken")
		if err != nil {
			return false, err
		}
		return m.Phase == "Failed" && m.ErrorReason == "InvalidConfiguration" && strings.Contains(m.ErrorMessage, "no capacity in zone-a"),
			fmt.Errorf("phase %q, errorReason %q, errorMessage %q", m.Phase, m.ErrorReason, m.ErrorMessage)
	})
	cluster.WaitFor(t, time.Minute, "Machine nonode Provisioned without a node", func(ctx context.Context) (bool, error) {
		m, err := mapi.Machine(ctx, "nonode")
		if err != nil {
			return false, err
		}
		return m.Phase == "Provisioned" && m.ProviderID == machineapi.ProviderIDPrefix+"nonode" && m.NodeRef == "",
			fmt.Errorf("phase %q, providerID %q, nodeRef %q", m.Phase, m.ProviderID, m.NodeRef)
	})
	if _, err := cp.Client().CoreV1().Nodes().Get(ctx, "nonode", metav1.GetOptions{}); !apierrors.IsNotFound(err) {
		t.Errorf("node nonode: %v, want none", err)
	}
	waitLinked(t, cp, mapi, "slow", "slow")
	m, err := mapi.Machine(ctx, "slow")
	if err != nil {
		t.Fatal(err)
	}
	if age := time.Since(m.Object.GetCreationTimestamp().Time); age < 5*time.Second {
		t.Errorf("Machine slow Running %s after its creation, before its 5s create delay", age)
	}
}

// A MachineHealthCheck remediates a MachineSet's Machine whose node holds an
// unhealthy condition: the Machine is deleted (its node drained and
// deleted) and the MachineSet's replacement runs.
func TestHealthCheckReplacesMachine(t *testing.T) {
	cp := env.ControlPlane(t)
	mapi := machineapi.Start(t, cp, machineapi.Options{})
	ctx := context.Background()
	mapi.CreateMachineSet(ctx, machineapi.MachineSetSpec{Name: "checked", Replicas: 1, Role: "worker"})
	before := waitMachineSet(t, cp, mapi, "checked", 2*time.Minute, 1)
	mapi.CreateMHC(ctx, machineapi.MHCSpec{
		Name:     "checked",
		Selector: map[string]string{machineapi.LabelMachineSet: "checked"},
		// kwok keeps Ready True on its nodes: a condition of our own.
		UnhealthyConditions: []machineapi.UnhealthyCondition{{Type: "NodewardTestBroken", Status: corev1.ConditionTrue, Timeout: time.Second}},
		MaxUnhealthy:        "1",
	})
	var sick, sickNode string
	for m, n := range before {
		sick, sickNode = m, n
	}
	mapi.SetNodeCondition(ctx, sickNode, "NodewardTestBroken", corev1.ConditionTrue, "Test")
	waitGone(t, cp, mapi, sick, sickNode, 2*time.Minute)
	after := waitMachineSet(t, cp, mapi, "checked", 2*time.Minute, 1)
	if _, same := after[sick]; same {
		t.Fatalf("Machine %s still there: %v", sick, after)
	}
}
