package deploy_test

import (
	"context"
	"fmt"
	"strings"
	"testing"
	"time"

	coordinationv1 "k8s.io/api/coordination/v1"
	corev1 "k8s.io/api/core/v1"
	policyv1 "k8s.io/api/policy/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/apimachinery/pkg/util/intstr"
	"k8s.io/client-go/kubernetes"

	"github.com/nodeward/nodeward/api/v1alpha1"
	"github.com/nodeward/nodeward/test/cluster"
)

// Messages of the admission policies in manifests/base/admission-policy.yaml;
// matching them proves the policy, not RBAC, refused the request.
const (
	msgOtherNode  = "may only change its own Node"
	msgLabels     = "may not change Node labels"
	msgOtherLease = "may only write the Lease"
	msgOtherPod   = "may only evict pods bound to its node"
	msgDeletePod  = "may only delete pods bound to its node"
	msgUnbound    = "not bound to a node"
)

// TestAgentConfinedToItsNode runs the agent's identity with real bound
// tokens against the installed RBAC and admission policies: the agent of
// node A may patch node A, its status and its Lease and evict A's pods, and
// nothing of node B's; a token bound to no node may change no Node at all.
// Both bindings that carry a node are covered: the pod-bound token every
// DaemonSet pod gets, and a token bound to the Node itself.
func TestAgentConfinedToItsNode(t *testing.T) {
	t.Parallel()
	cp := env.ControlPlane(t)
	installBase(t, cp)
	nodes := cp.CreateNodes(t, cluster.NodeSpec{Prefix: "guard", Count: 2, Role: "worker"})
	nodeA, nodeB := nodes[0], nodes[1]
	ns := cp.Namespace(t)

	// A pod on B that no eviction can remove even if admission let it
	// through: the PDB answers 429, so a broken policy shows as a 429, not
	// as a lost pod.
	protectedB := createPod(t, cp, ns, "protected-b", nodeB, map[string]string{"guard": "protected"})
	createPDB(t, cp, ns, "protected", map[string]string{"guard": "protected"})

	agentPod := agentPodOn(t, cp, nodeA)
	bindings := []boundTo{
		{kind: "Pod", name: agentPod, namespace: v1alpha1.AgentLeaseNamespace},
		{kind: "Node", name: nodeA},
	}
	// The policies start to apply once the API server has loaded them (and
	// the eviction policy its pod parameters): wait until the agent is
	// refused on node B before asserting anything.
	// A write that gets through before the policy is loaded must not turn
	// the next try into a no-op (a no-op is never refused): a new key each
	// time.
	gate := serviceAccountClient(t, cp, agentServiceAccount, bindings[1])
	tries := 0
	waitDenied(t, "the own-node policy to refuse a patch of "+nodeB, msgOtherNode, func(ctx context.Context) error {
		tries++
		return patchAnnotation(ctx, gate, nodeB, fmt.Sprintf("nodeward.test/gate-%d", tries), "1")
	})
	waitDenied(t, "the eviction policy to refuse evicting "+protectedB, msgOtherPod, func(ctx context.Context) error {
		return evict(ctx, gate, ns, protectedB)
	})

	for _, binding := range bindings {
		t.Run("token bound to "+binding.kind, func(t *testing.T) {
			ctx := context.Background()
			agent := serviceAccountClient(t, cp, agentServiceAccount, binding)

			requireAllowed(t, "agent of A patches node A's annotations", patchAnnotation(ctx, agent, nodeA, v1alpha1.AnnotationReason, "by-"+binding.kind))
			requireAllowed(t, "agent of A taints node A", patchTaint(ctx, agent, nodeA, "nodeward.io/test-"+strings.ToLower(binding.kind)))
			requireAllowed(t, "agent of A patches node A's status", patchCondition(ctx, agent, nodeA))
			requireForbidden(t, "agent of A patches node B's annotations", patchAnnotation(ctx, agent, nodeB, "nodeward.test/x", "1"), msgOtherNode)
			requireForbidden(t, "agent of A taints node B", patchTaint(ctx, agent, nodeB, "nodeward.io/x"), msgOtherNode)
			requireForbidden(t, "agent of A patches node B's status", patchCondition(ctx, agent, nodeB), msgOtherNode)
			requireForbidden(t, "agent of A relabels node A", patchLabel(ctx, agent, nodeA), msgLabels)

			// The Lease is created once; later writes by either binding update it.
			requireAllowed(t, "agent of A writes its Lease", writeLease(ctx, agent, nodeA))
			requireForbidden(t, "agent of A writes node B's Lease", writeLease(ctx, agent, nodeB), msgOtherLease)

			podA := createPod(t, cp, ns, "evictable-a-"+strings.ToLower(binding.kind), nodeA, nil)
			requireForbidden(t, "agent of A evicts a pod on node B", evict(ctx, agent, ns, protectedB), msgOtherPod)
			requireAllowed(t, "agent of A evicts a pod on node A", evict(ctx, agent, ns, podA))
			cluster.WaitFor(t, 30*time.Second, "evicted pod "+podA+" to disappear", func(ctx context.Context) (bool, error) {
				_, err := cp.Client().CoreV1().Pods(ns).Get(ctx, podA, metav1.GetOptions{})
				return apierrors.IsNotFound(err), nil
			})
			deletableA := createPod(t, cp, ns, "deletable-a-"+strings.ToLower(binding.kind), nodeA, nil)
			requireForbidden(t, "agent of A deletes a pod on node B", deletePod(ctx, agent, ns, protectedB), msgDeletePod)
			requireAllowed(t, "agent of A deletes a pod on node A", deletePod(ctx, agent, ns, deletableA))
			requireForbidden(t, "agent may create UpdatePools", updatePoolWrite(ctx, agent, "POST", ""), "")
			requireForbidden(t, "agent may update UpdatePools", updatePoolWrite(ctx, agent, "PUT", "default"), "")
			requireForbidden(t, "agent may delete UpdatePools", updatePoolWrite(ctx, agent, "DELETE", "default"), "")
			requireForbidden(t, "agent may write UpdatePool status", updatePoolWrite(ctx, agent, "PUT", "default/status"), "")
		})
	}

	t.Run("token bound to no node", func(t *testing.T) {
		ctx := context.Background()
		unbound := serviceAccountClient(t, cp, agentServiceAccount, boundTo{})
		requireForbidden(t, "unbound agent token patches node A", patchAnnotation(ctx, unbound, nodeA, "nodeward.test/x", "1"), msgUnbound)
		requireForbidden(t, "unbound agent token evicts a pod", evict(ctx, unbound, ns, protectedB), msgUnbound)
		requireForbidden(t, "unbound agent token deletes a pod", deletePod(ctx, unbound, ns, protectedB), msgUnbound)
	})
}

// TestCoordinatorCannotEvict: draining is the agent's job; the coordinator's
// identity is refused by RBAC itself.
func TestCoordinatorCannotEvict(t *testing.T) {
	t.Parallel()
	cp := env.ControlPlane(t)
	installBase(t, cp)
	nodes := cp.CreateNodes(t, cluster.NodeSpec{Prefix: "coord", Count: 1, Role: "worker"})
	ns := cp.Namespace(t)
	pod := createPod(t, cp, ns, "victim", nodes[0], nil)
	coordinator := serviceAccountClient(t, cp, coordinatorServiceAccount, boundTo{})
	ctx := context.Background()
	requireForbidden(t, "coordinator evicts a pod", evict(ctx, coordinator, ns, pod), `cannot create resource "pods/eviction"`)
	err := coordinator.CoreV1().Pods(ns).Delete(ctx, pod, metav1.DeleteOptions{})
	requireForbidden(t, "coordinator deletes a pod", err, `cannot delete resource "pods"`)
	// What it is for still works: annotating a node to grant a slot.
	requireAllowed(t, "coordinator annotates a node", patchAnnotation(ctx, coordinator, nodes[0], "nodeward.test/grant", "1"))
}

// TestAgentReadsUpdatePools: the base installs the UpdatePool CRD and the
// agent may read pools (403 would be RBAC). A 404 only means the CRD is not
// served yet, so it is waited out.
func TestAgentReadsUpdatePools(t *testing.T) {
	t.Parallel()
	cp := env.ControlPlane(t)
	installBase(t, cp)
	agent := serviceAccountClient(t, cp, agentServiceAccount, boundTo{})
	var err error
	cluster.WaitFor(t, 30*time.Second, "the UpdatePool CRD to be served", func(ctx context.Context) (bool, error) {
		err = agent.CoreV1().RESTClient().Get().AbsPath("/apis/nodeward.io/v1alpha1/updatepools").Do(ctx).Error()
		return !apierrors.IsNotFound(err), err
	})
	requireAllowed(t, "agent lists UpdatePools", err)
}

func waitDenied(t *testing.T, what, want string, try func(context.Context) error) {
	t.Helper()
	cluster.WaitFor(t, 30*time.Second, what, func(ctx context.Context) (bool, error) {
		err := try(ctx)
		return apierrors.IsForbidden(err) && strings.Contains(err.Error(), want), nil
	})
}

func patchAnnotation(ctx context.Context, c kubernetes.Interface, node, key, value string) error {
	patch := fmt.Sprintf(`{"metadata":{"annotations":{%q:%q}}}`, key, value)
	_, err := c.CoreV1().Nodes().Patch(ctx, node, types.StrategicMergePatchType, []byte(patch), metav1.PatchOptions{})
	return err
}

func patchLabel(ctx context.Context, c kubernetes.Interface, node string) error {
	patch := `{"metadata":{"labels":{"node-role.kubernetes.io/control-plane":""}}}`
	_, err := c.CoreV1().Nodes().Patch(ctx, node, types.StrategicMergePatchType, []byte(patch), metav1.PatchOptions{})
	return err
}

// patchTaint adds a taint the way the agent does: read, append, update with
// the read resourceVersion as precondition.
func patchTaint(ctx context.Context, c kubernetes.Interface, node, key string) error {
	n, err := c.CoreV1().Nodes().Get(ctx, node, metav1.GetOptions{})
	if err != nil {
		return err
	}
	n.Spec.Taints = append(n.Spec.Taints, corev1.Taint{Key: key, Effect: corev1.TaintEffectNoSchedule})
	_, err = c.CoreV1().Nodes().Update(ctx, n, metav1.UpdateOptions{})
	return err
}

func patchCondition(ctx context.Context, c kubernetes.Interface, node string) error {
	now := metav1.Now().UTC().Format(time.RFC3339)
	patch := fmt.Sprintf(`{"status":{"conditions":[{"type":%q,"status":"False","reason":"Test","lastHeartbeatTime":%q,"lastTransitionTime":%q}]}}`,
		v1alpha1.ConditionDiskPressure, now, now)
	_, err := c.CoreV1().Nodes().PatchStatus(ctx, node, []byte(patch))
	return err
}

func writeLease(ctx context.Context, c kubernetes.Interface, node string) error {
	leases := c.CoordinationV1().Leases(v1alpha1.AgentLeaseNamespace)
	name := v1alpha1.AgentLeaseName(node)
	existing, err := leases.Get(ctx, name, metav1.GetOptions{})
	switch {
	case apierrors.IsNotFound(err):
		_, err = leases.Create(ctx, &coordinationv1.Lease{
			ObjectMeta: metav1.ObjectMeta{Name: name, Namespace: v1alpha1.AgentLeaseNamespace},
			Spec:       coordinationv1.LeaseSpec{HolderIdentity: ptrTo(node), LeaseDurationSeconds: ptrTo[int32](v1alpha1.AgentLeaseDurationSeconds)},
		}, metav1.CreateOptions{})
		return err
	case err != nil:
		return err
	}
	existing.Spec.RenewTime = &metav1.MicroTime{Time: time.Now()}
	_, err = leases.Update(ctx, existing, metav1.UpdateOptions{})
	return err
}

func evict(ctx context.Context, c kubernetes.Interface, ns, pod string) error {
	return c.CoreV1().Pods(ns).EvictV1(ctx, &policyv1.Eviction{ObjectMeta: metav1.ObjectMeta{Name: pod, Namespace: ns}})
}

// updatePoolWrite sends a write to the UpdatePool API; RBAC answers before
// the resource is looked up, so this holds with or without the CRD.
func updatePoolWrite(ctx context.Context, c kubernetes.Interface, verb, sub string) error {
	path := "/apis/nodeward.io/v1alpha1/updatepools"
	if sub != "" {
		path += "/" + sub
	}
	body := []byte(`{"apiVersion":"nodeward.io/v1alpha1","kind":"UpdatePool","metadata":{"name":"default"}}`)
	return c.CoreV1().RESTClient().Verb(verb).AbsPath(path).Body(body).SetHeader("Content-Type", "application/json").Do(ctx).Error()
}

func createPod(t *testing.T, cp *cluster.ControlPlane, ns, name, node string, labels map[string]string) string {
	t.Helper()
	pod := &corev1.Pod{
		ObjectMeta: metav1.ObjectMeta{Name: name, Namespace: ns, Labels: labels},
		Spec: corev1.PodSpec{
			NodeName:                      node,
			TerminationGracePeriodSeconds: ptrTo[int64](1),
			Containers:                    []corev1.Container{{Name: "app", Image: "registry.invalid/app:1"}},
		},
	}
	if _, err := cp.Client().CoreV1().Pods(ns).Create(context.Background(), pod, metav1.CreateOptions{}); err != nil {
		t.Fatalf("create pod %s on %s: %v", name, node, err)
	}
	cluster.WaitFor(t, 30*time.Second, "pod "+name+" Running", func(ctx context.Context) (bool, error) {
		p, err := cp.Client().CoreV1().Pods(ns).Get(ctx, name, metav1.GetOptions{})
		return err == nil && p.Status.Phase == corev1.PodRunning, err
	})
	return name
}

func createPDB(t *testing.T, cp *cluster.ControlPlane, ns, name string, labels map[string]string) {
	t.Helper()
	pdb := &policyv1.PodDisruptionBudget{
		ObjectMeta: metav1.ObjectMeta{Name: name, Namespace: ns},
		Spec: policyv1.PodDisruptionBudgetSpec{
			MaxUnavailable: ptrTo(intstr.FromInt32(0)),
			Selector:       &metav1.LabelSelector{MatchLabels: labels},
		},
	}
	if _, err := cp.Client().PolicyV1().PodDisruptionBudgets(ns).Create(context.Background(), pdb, metav1.CreateOptions{}); err != nil {
		t.Fatalf("create PDB %s: %v", name, err)
	}
}

func deletePod(ctx context.Context, c kubernetes.Interface, ns, pod string) error {
	return c.CoreV1().Pods(ns).Delete(ctx, pod, metav1.DeleteOptions{})
}
