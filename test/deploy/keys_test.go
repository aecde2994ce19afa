package deploy_test

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"reflect"
	"regexp"
	"slices"
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/util/retry"
	"sigs.k8s.io/yaml"

	"github.com/nodeward/nodeward/api/v1alpha1"
	"github.com/nodeward/nodeward/daemon/mco"
	"github.com/nodeward/nodeward/test/cluster"
)

// The agent's ValidatingAdmissionPolicies, one per kind.
var agentPolicies = []string{
	"nodeward-agent-own-node", "nodeward-agent-own-lease", "nodeward-agent-delete-own-pods",
	"nodeward-agent-own-events", "nodeward-agent-evict-own-node",
}

// Messages of the own-keys rules of nodeward-agent-own-node.
const (
	msgForeignAnnotation = "may write only its own annotations"
	msgSpec              = "may change only spec.unschedulable and spec.taints"
	msgReservedTaint     = "may not add, change or remove Kubernetes' own taints"
	msgStatus            = "may change only status.conditions"
	msgForeignCondition  = "may write only its own Node conditions"
	msgNodeMeta          = "may not change the finalizers or owner references"
	msgOtherEvent        = "may only record Events about its own Node"
)

// The agent's own annotations (docs/protocol.md, "Who may write which key").
var agentKeys = []string{
	v1alpha1.AnnotationState, v1alpha1.AnnotationStateTarget, v1alpha1.AnnotationStateGrant,
	v1alpha1.AnnotationStaged, v1alpha1.AnnotationReason, v1alpha1.AnnotationUnavailableSince,
	v1alpha1.AnnotationCordonedBy,
}

const (
	preDrainHook  = v1alpha1.PreDrainHookPrefix + "etcd-quorum"
	preRebootHook = v1alpha1.PreRebootHookPrefix + "log-flush"
	foreignKey    = "example.com/owner"
	// reservedTaint is a Kubernetes-owned key no controller manages, with an
	// effect that does not keep the agent's DaemonSet pod off the node.
	reservedTaint = "test.kubernetes.io/reserved"
)

// TestAgentWritesOnlyItsKeys runs the agent's real pod-bound token against
// the installed policy on a Node that carries everything a granted node
// carries: the coordinator's keys, two lifecycle hooks of other owners,
// someone else's annotation and a Kubernetes-owned taint. The agent writes
// each of its own keys, cordons, taints and publishes its conditions the way
// its code does (merge patches, the cordon's PUT, strategic merge patches
// of status), and is refused, by the policy and with its message, every
// write that would grant it a slot, change its drain policy, hold or free
// it, touch a hook or another owner's key, or change anything else of the
// Node. The coordinator's identity is not affected.
func TestAgentWritesOnlyItsKeys(t *testing.T) {
	t.Parallel()
	cp := env.ControlPlane(t)
	installBase(t, cp)
	coordinatorKeys := map[string]string{
		v1alpha1.AnnotationTarget:              "registry.example/os@sha256:1",
		v1alpha1.AnnotationGrant:               "workers-1700000000-1",
		v1alpha1.AnnotationGrantTarget:         "registry.example/os@sha256:1",
		v1alpha1.AnnotationDrainTimeout:        "10m",
		v1alpha1.AnnotationYieldOnDrainTimeout: "true",
		v1alpha1.AnnotationForceOnDrainTimeout: "false",
		v1alpha1.AnnotationYieldedAt:           "2025-01-01T00:00:00Z",
	}
	annotations := map[string]string{preDrainHook: "etcd-guard", preRebootHook: "log-shipper", foreignKey: "someone"}
	for k, v := range coordinatorKeys {
		annotations[k] = v
	}
	node := cp.CreateNodes(t, cluster.NodeSpec{
		Prefix: "keys", Count: 1, Role: "worker", Annotations: annotations,
		Taints: []corev1.Taint{{Key: reservedTaint, Effect: corev1.TaintEffectPreferNoSchedule}},
	})[0]
	agent := serviceAccountClient(t, cp, agentServiceAccount, boundTo{kind: "Pod", name: agentPodOn(t, cp, node), namespace: v1alpha1.AgentLeaseNamespace})
	coordinator := serviceAccountClient(t, cp, coordinatorServiceAccount, boundTo{})
	ctx := context.Background()

	// Until the API server has loaded the policy, writes pass unchecked: the
	// gate adds a new key at each try, so that a try that got through
	// cannot make the next one a no-op.
	tries := 0
	waitDenied(t, "the own-keys rule to refuse the agent's annotations", msgForeignAnnotation, func(ctx context.Context) error {
		tries++
		return mergeAnnotations(ctx, agent, node, "", map[string]*string{fmt.Sprintf("nodeward.test/gate-%d", tries): ptrTo("1")})
	})

	t.Run("agent writes its own keys", func(t *testing.T) {
		for _, key := range agentKeys {
			for _, v := range []*string{ptrTo("one"), ptrTo("two"), nil} {
				requireAllowed(t, fmt.Sprintf("agent sets %s=%v", key, deref(v)), mergeAnnotations(ctx, agent, node, "", map[string]*string{key: v}))
			}
		}
		// One patch of every protocol key, as AnnotationProtocol.Report sends it.
		report := map[string]*string{}
		for _, key := range agentKeys[:6] {
			report[key] = ptrTo("Draining")
		}
		requireAllowed(t, "agent reports all its keys in one patch", mergeAnnotations(ctx, agent, node, "", report))
		requireAllowed(t, "agent reports Done", mergeAnnotations(ctx, agent, node, "", map[string]*string{v1alpha1.AnnotationState: ptrTo(string(v1alpha1.StepDone))}))
	})

	t.Run("agent cordons, taints and publishes its conditions", func(t *testing.T) {
		requireAllowed(t, "agent cordons with its record (PUT)", updateNode(ctx, agent, node, func(n *corev1.Node) {
			n.Spec.Unschedulable = true
			n.Annotations[v1alpha1.AnnotationCordonedBy] = "nodeward"
		}))
		requireAllowed(t, "agent adds its taint", mergeTaints(ctx, agent, node, func(ts []corev1.Taint) []corev1.Taint {
			return append(ts, corev1.Taint{Key: "nodeward.io/memory-pressure", Effect: corev1.TaintEffectNoSchedule})
		}))
		requireAllowed(t, "agent removes its taint", mergeTaints(ctx, agent, node, func(ts []corev1.Taint) []corev1.Taint {
			return without(ts, "nodeward.io/memory-pressure")
		}))
		requireAllowed(t, "agent uncordons and drops its record (PUT)", updateNode(ctx, agent, node, func(n *corev1.Node) {
			n.Spec.Unschedulable = false
			delete(n.Annotations, v1alpha1.AnnotationCordonedBy)
		}))
		for _, c := range append(v1alpha1.HealthConditions(), v1alpha1.ConditionDrainable, v1alpha1.ConditionDrained, v1alpha1.ConditionRebootable) {
			requireAllowed(t, "agent publishes "+string(c), patchConditionOf(ctx, agent, node, c, corev1.ConditionFalse))
		}
		event, err := createEvent(ctx, agent, metav1.NamespaceDefault, node)
		requireAllowed(t, "agent records an Event about its Node", err)
		// A recorder patches a repeated Event's count and last timestamp.
		_, err = agent.CoreV1().Events(metav1.NamespaceDefault).Patch(ctx, event, types.StrategicMergePatchType,
			[]byte(`{"count":2,"lastTimestamp":"`+time.Now().UTC().Format(time.RFC3339)+`"}`), metav1.PatchOptions{})
		requireAllowed(t, "agent patches its Event", err)
	})

	t.Run("agent is refused everyone else's keys", func(t *testing.T) {
		refuse := func(what string, err error, key string) {
			t.Helper()
			requireForbidden(t, what, err, msgForeignAnnotation)
			if !strings.Contains(err.Error(), "not "+key) {
				t.Fatalf("%s: the refusal does not name %s: %v", what, key, err)
			}
		}
		for key := range coordinatorKeys {
			refuse("agent changes "+key, mergeAnnotations(ctx, agent, node, "", map[string]*string{key: ptrTo("forged")}), key)
			refuse("agent removes "+key, mergeAnnotations(ctx, agent, node, "", map[string]*string{key: nil}), key)
		}
		refuse("agent holds its node", mergeAnnotations(ctx, agent, node, "", map[string]*string{v1alpha1.AnnotationHold: ptrTo("true")}), v1alpha1.AnnotationHold)
		refuse("agent removes a pre-drain hook", mergeAnnotations(ctx, agent, node, "", map[string]*string{preDrainHook: nil}), preDrainHook)
		refuse("agent changes a pre-drain hook's owner", mergeAnnotations(ctx, agent, node, "", map[string]*string{preDrainHook: ptrTo("nodeward")}), preDrainHook)
		refuse("agent removes a pre-reboot hook", mergeAnnotations(ctx, agent, node, "", map[string]*string{preRebootHook: nil}), preRebootHook)
		extraHook := v1alpha1.PreDrainHookPrefix + "forged"
		refuse("agent adds a pre-drain hook", mergeAnnotations(ctx, agent, node, "", map[string]*string{extraHook: ptrTo("nodeward")}), extraHook)
		refuse("agent removes someone else's annotation", mergeAnnotations(ctx, agent, node, "", map[string]*string{foreignKey: nil}), foreignKey)
		refuse("agent removes a hook with a PUT", updateNode(ctx, agent, node, func(n *corev1.Node) { delete(n.Annotations, preRebootHook) }), preRebootHook)
		// The status subresource keeps a Node's metadata writable: the rule
		// holds there too.
		refuse("agent writes the grant through nodes/status", mergeAnnotations(ctx, agent, node, "status", map[string]*string{v1alpha1.AnnotationGrant: ptrTo("forged")}), v1alpha1.AnnotationGrant)
		// A request mixing an own key with a foreign one is refused whole.
		refuse("agent reports Done and drops its grant in one patch", mergeAnnotations(ctx, agent, node, "", map[string]*string{
			v1alpha1.AnnotationState: ptrTo("Yielded"), v1alpha1.AnnotationGrant: nil,
		}), v1alpha1.AnnotationGrant)

		n, err := cp.Client().CoreV1().Nodes().Get(ctx, node, metav1.GetOptions{})
		if err != nil {
			t.Fatal(err)
		}
		if got := n.Annotations[v1alpha1.AnnotationState]; got != string(v1alpha1.StepDone) {
			t.Errorf("state = %q after the refused mixed patch, want Done (unchanged)", got)
		}
		for key, want := range annotations {
			if got, ok := n.Annotations[key]; !ok || got != want {
				t.Errorf("annotation %s = %q (present %v) after the refused writes, want %q", key, got, ok, want)
			}
		}
		if _, ok := n.Annotations[v1alpha1.AnnotationHold]; ok {
			t.Errorf("the refused hold is on the node")
		}
	})

	t.Run("agent is refused other fields of its Node", func(t *testing.T) {
		requireForbidden(t, "agent sets its pod CIDR", mergePatch(ctx, agent, node, "", `{"spec":{"podCIDR":"10.244.7.0/24","podCIDRs":["10.244.7.0/24"]}}`), msgSpec)
		requireForbidden(t, "agent sets its provider ID", mergePatch(ctx, agent, node, "", `{"spec":{"providerID":"kwok://forged"}}`), msgSpec)
		requireForbidden(t, "agent removes a Kubernetes taint", mergeTaints(ctx, agent, node, func(ts []corev1.Taint) []corev1.Taint {
			return without(ts, reservedTaint)
		}), msgReservedTaint)
		requireForbidden(t, "agent adds a Kubernetes taint", mergeTaints(ctx, agent, node, func(ts []corev1.Taint) []corev1.Taint {
			return append(ts, corev1.Taint{Key: "example.k8s.io/forged", Effect: corev1.TaintEffectPreferNoSchedule})
		}), msgReservedTaint)
		requireForbidden(t, "agent adds a finalizer", mergePatch(ctx, agent, node, "", `{"metadata":{"finalizers":["example.com/keep"]}}`), msgNodeMeta)
		requireForbidden(t, "agent sets an owner reference", mergePatch(ctx, agent, node, "",
			`{"metadata":{"ownerReferences":[{"apiVersion":"v1","kind":"ConfigMap","name":"gone","uid":"00000000-0000-0000-0000-000000000001"}]}}`), msgNodeMeta)
		requireForbidden(t, "agent changes its capacity", strategicPatchStatus(ctx, agent, node, `{"status":{"capacity":{"pods":"1000"}}}`), msgStatus)
		requireForbidden(t, "agent changes its addresses", strategicPatchStatus(ctx, agent, node, `{"status":{"addresses":[{"type":"InternalIP","address":"192.0.2.1"}]}}`), msgStatus)
		err := patchConditionOf(ctx, agent, node, corev1.NodeReady, corev1.ConditionTrue)
		requireForbidden(t, "agent writes the kubelet's Ready", err, msgForeignCondition)
		if !strings.Contains(err.Error(), "not Ready") {
			t.Fatalf("the refusal does not name Ready: %v", err)
		}
		requireForbidden(t, "agent writes the kubelet's MemoryPressure", patchConditionOf(ctx, agent, node, corev1.NodeMemoryPressure, corev1.ConditionFalse), msgForeignCondition)
		requireForbidden(t, "agent adds a condition type of its own invention", patchConditionOf(ctx, agent, node, "Forged", corev1.ConditionTrue), msgForeignCondition)
		_, err = createEvent(ctx, agent, metav1.NamespaceDefault, "keys-elsewhere")
		requireForbidden(t, "agent records an Event about another Node", err, msgOtherEvent)
		_, err = createEvent(ctx, agent, v1alpha1.AgentLeaseNamespace, node)
		requireForbidden(t, "agent records an Event outside default", err, `cannot create resource "events"`)
		requireForbidden(t, "agent records an events.k8s.io Event", createEventsV1(ctx, agent, node), `cannot create resource "events"`)
	})

	t.Run("agent releases a grant marked release-at-done in its Done report", func(t *testing.T) {
		grant := coordinatorKeys[v1alpha1.AnnotationGrant]
		// The patch AnnotationProtocol.Report sends for Done on a grant
		// with release-at-done (update.ReportAnnotations), plus extra.
		doneReport := func(stateGrant string, step v1alpha1.Step, extra map[string]*string) map[string]*string {
			set := map[string]*string{v1alpha1.AnnotationState: ptrTo(string(step)), v1alpha1.AnnotationStateGrant: &stateGrant}
			for _, k := range v1alpha1.ReleaseKeys() {
				set[k] = nil
			}
			for k, v := range extra {
				set[k] = v
			}
			return set
		}
		refuse := func(what string, set map[string]*string) {
			t.Helper()
			requireForbidden(t, what, mergeAnnotations(ctx, agent, node, "", set), msgForeignAnnotation)
		}
		refuse("agent drops a grant the coordinator did not mark", doneReport(grant, v1alpha1.StepDone, nil))
		requireAllowed(t, "the coordinator marks the grant", mergeAnnotations(ctx, coordinator, node, "", map[string]*string{
			v1alpha1.AnnotationReleaseAtDone: ptrTo("true"), v1alpha1.AnnotationGrantPool: ptrTo("workers")}))
		refuse("agent drops its marked grant before Done", doneReport(grant, v1alpha1.StepDraining, nil))
		refuse("agent drops a marked grant reporting Done for another grant", doneReport("workers-1600000000-9", v1alpha1.StepDone, nil))
		refuse("agent drops a hook with its grant", doneReport(grant, v1alpha1.StepDone, map[string]*string{preRebootHook: nil}))
		refuse("agent drops its drain policy with its grant", doneReport(grant, v1alpha1.StepDone, map[string]*string{v1alpha1.AnnotationDrainTimeout: nil}))
		refuse("agent rewrites its grant at Done", doneReport(grant, v1alpha1.StepDone, map[string]*string{v1alpha1.AnnotationGrant: ptrTo("forged")}))

		requireAllowed(t, "agent reports Done and gives its marked grant back", mergeAnnotations(ctx, agent, node, "", doneReport(grant, v1alpha1.StepDone, nil)))
		n, err := cp.Client().CoreV1().Nodes().Get(ctx, node, metav1.GetOptions{})
		if err != nil {
			t.Fatal(err)
		}
		for _, k := range v1alpha1.ReleaseKeys() {
			if v, ok := n.Annotations[k]; ok {
				t.Errorf("%s = %q after the agent's release, want it removed", k, v)
			}
		}
		for _, k := range []string{v1alpha1.AnnotationTarget, v1alpha1.AnnotationDrainTimeout, preDrainHook, preRebootHook, foreignKey} {
			if n.Annotations[k] != annotations[k] {
				t.Errorf("%s = %q after the agent's release, want %q (untouched)", k, n.Annotations[k], annotations[k])
			}
		}
	})

	t.Run("coordinator is unaffected", func(t *testing.T) {
		set := map[string]*string{v1alpha1.AnnotationHold: ptrTo("true")}
		for key := range coordinatorKeys {
			set[key] = ptrTo("rewritten")
		}
		requireAllowed(t, "coordinator writes its keys", mergeAnnotations(ctx, coordinator, node, "", set))
		requireAllowed(t, "coordinator stamps a hook", mergeAnnotations(ctx, coordinator, node, "", map[string]*string{v1alpha1.PreDrainHookPrefix + "pool": ptrTo("nodeward-coordinator")}))
		requireAllowed(t, "coordinator removes its grant and the hold", mergeAnnotations(ctx, coordinator, node, "", map[string]*string{
			v1alpha1.AnnotationGrant: nil, v1alpha1.AnnotationHold: nil,
		}))
		requireAllowed(t, "coordinator marks a silent agent's condition Unknown", patchConditionOf(ctx, coordinator, node, v1alpha1.ConditionDiskPressure, corev1.ConditionUnknown))
	})
}

// TestEvictionParameterNotFound pins the API server behaviour behind
// parameterNotFoundAction: Allow on the eviction policy's binding. The
// pods that are the policy's parameters are collected before the policy's
// match conditions run, so the action applies to every eviction in the
// cluster, whoever sends it. With Deny, an eviction in a namespace without
// pods (typically: the pod was deleted after the drain listed it) answers
// 422 instead of 404, and kubectl drain, the cluster autoscaler and
// nodeward's own drain take a 404 as "gone" but anything else as a failure.
func TestEvictionParameterNotFound(t *testing.T) {
	t.Parallel()
	cp := env.ControlPlane(t)
	installBase(t, cp)
	nodes := cp.CreateNodes(t, cluster.NodeSpec{Prefix: "noparam", Count: 1, Role: "worker"})
	agent := serviceAccountClient(t, cp, agentServiceAccount, boundTo{kind: "Pod", name: agentPodOn(t, cp, nodes[0]), namespace: v1alpha1.AgentLeaseNamespace})
	admin := cp.Client()
	ctx := context.Background()

	shipped := cp.Namespace(t)
	for who, c := range map[string]kubernetes.Interface{"admin": admin, "agent": agent} {
		if err := evict(ctx, c, shipped, "gone"); !apierrors.IsNotFound(err) {
			t.Errorf("%s evicts a missing pod in a namespace without pods: want 404, got %v", who, err)
		}
	}

	// The shipped policy bound with Deny, limited to one namespace of this
	// test so that it cannot disturb the other tests.
	denied := cp.Namespace(t)
	var policy admissionPolicy
	decodeManifest(t, "base/admission-policy.yaml", "ValidatingAdmissionPolicy", "nodeward-agent-evict-own-node", &policy)
	policy.Metadata = map[string]any{"name": "nodeward-test-evict-deny"}
	binding := map[string]any{
		"apiVersion": "admissionregistration.k8s.io/v1",
		"kind":       "ValidatingAdmissionPolicyBinding",
		"metadata":   map[string]any{"name": "nodeward-test-evict-deny"},
		"spec": map[string]any{
			"policyName":        "nodeward-test-evict-deny",
			"validationActions": []string{"Deny"},
			"paramRef":          map[string]any{"selector": map[string]any{}, "parameterNotFoundAction": "Deny"},
			"matchResources": map[string]any{"namespaceSelector": map[string]any{
				"matchLabels": map[string]string{"kubernetes.io/metadata.name": denied},
			}},
		},
	}
	applyObjects(t, cp, policy.raw(t), binding)
	t.Cleanup(func() {
		_, _ = runKubectl(cp, "delete", "--ignore-not-found", "validatingadmissionpolicybinding/nodeward-test-evict-deny", "validatingadmissionpolicy/nodeward-test-evict-deny")
	})
	var err error
	cluster.WaitFor(t, 30*time.Second, "an admin's eviction in a namespace without pods to be refused under Deny", func(ctx context.Context) (bool, error) {
		err = evict(ctx, admin, denied, "gone")
		return err != nil && strings.Contains(err.Error(), "no params found"), nil
	})
	if apierrors.IsNotFound(err) {
		t.Fatalf("under Deny the eviction of a missing pod still answers 404: %v", err)
	}
	var status apierrors.APIStatus
	if errors.As(err, &status) {
		t.Logf("under Deny, an admin's eviction of a missing pod answers %d %s instead of 404 NotFound", status.Status().Code, status.Status().Reason)
	}
}

// TestAgentPolicyNamesItsKeys ties the policy's lists to the Go constants:
// the base's agent annotations and conditions are exactly the agent's, the
// OpenShift overlay adds the machine-config-daemon keys of the MCO protocol
// and, for the first-boot write alone, desiredConfig, desiredImage and
// firstPivotConfig (none in the base), and every field of NodeSpec and
// NodeStatus but the agent's own is pinned.
func TestAgentPolicyNamesItsKeys(t *testing.T) {
	t.Parallel()
	var base, openshift admissionPolicy
	build(t, "base").decode(t, "ValidatingAdmissionPolicy/nodeward-agent-own-node", &base)
	build(t, "overlays/openshift").decode(t, "ValidatingAdmissionPolicy/nodeward-agent-own-node", &openshift)

	requireSameSet(t, "base agentAnnotations", celStrings(t, base.variable(t, "agentAnnotations")), agentKeys)
	requireSameSet(t, "base releaseKeys", celStrings(t, base.variable(t, "releaseKeys")), v1alpha1.ReleaseKeys())
	requireSameSet(t, "openshift agentAnnotations", celStrings(t, openshift.variable(t, "agentAnnotations")),
		append([]string{mco.AnnotationCurrentConfig, mco.AnnotationCurrentImage, mco.AnnotationState,
			mco.AnnotationReason, mco.AnnotationDesiredDrain, mco.AnnotationLastSyncedControllerCfg,
			mco.AnnotationLastObservedServerCA}, agentKeys...))
	// The first-boot write's keys (daemon/mco/bootstrap.go): none outside
	// MCO mode.
	requireSameSet(t, "base firstBootKeys", celStrings(t, base.variable(t, "firstBootKeys")), nil)
	requireSameSet(t, "openshift firstBootKeys", celStrings(t, openshift.variable(t, "firstBootKeys")),
		[]string{mco.AnnotationDesiredConfig, mco.AnnotationDesiredImage, mco.AnnotationFirstPivotConfig})
	var conds []string
	for _, c := range append(v1alpha1.HealthConditions(), v1alpha1.ConditionDrainable, v1alpha1.ConditionDrained, v1alpha1.ConditionRebootable) {
		conds = append(conds, string(c))
	}
	requireSameSet(t, "agentConditions", celStrings(t, base.variable(t, "agentConditions")), conds)

	all := base.expressions()
	for _, f := range jsonFields(corev1.NodeSpec{}) {
		if f == "unschedulable" || f == "taints" {
			continue
		}
		if want := fmt.Sprintf("object.spec.?%s == oldObject.spec.?%s", f, f); !strings.Contains(all, want) {
			t.Errorf("NodeSpec.%s is not pinned: the policy lacks %q", f, want)
		}
	}
	for _, f := range jsonFields(corev1.NodeStatus{}) {
		if f == "conditions" {
			continue
		}
		typed := fmt.Sprintf("object.status.?%s == oldObject.status.?%s", f, f)
		dynamic := fmt.Sprintf("dyn(object.status).?%s == dyn(oldObject.status).?%s", f, f)
		if !strings.Contains(all, typed) && !strings.Contains(all, dynamic) {
			t.Errorf("NodeStatus.%s is not pinned: the policy lacks %q", f, typed)
		}
	}
}

// TestAdmissionPoliciesTypeCheck: the API server type-checks the installed
// policies' CEL against the Node, Lease, Pod and Event schemas and reports
// any warning in the policy's status.
func TestAdmissionPoliciesTypeCheck(t *testing.T) {
	t.Parallel()
	cp := env.ControlPlane(t)
	installBase(t, cp)
	requireTypeChecked(t, cp, agentPolicies...)
}

// requireTypeChecked waits for the API server to type-check the installed
// policies and fails the test on each warning it reports.
func requireTypeChecked(t *testing.T, cp *cluster.ControlPlane, names ...string) {
	t.Helper()
	for _, name := range names {
		cluster.WaitFor(t, 30*time.Second, "policy "+name+" type-checked", func(ctx context.Context) (bool, error) {
			p, err := cp.Client().AdmissionregistrationV1().ValidatingAdmissionPolicies().Get(ctx, name, metav1.GetOptions{})
			if err != nil {
				return false, err
			}
			if p.Status.ObservedGeneration != p.Generation || p.Status.TypeChecking == nil {
				return false, nil
			}
			for _, w := range p.Status.TypeChecking.ExpressionWarnings {
				t.Errorf("policy %s: %s: %s", name, w.FieldRef, w.Warning)
			}
			return true, nil
		})
	}
}

// mergeAnnotations sends the agent's kind of annotation write: a JSON merge
// patch setting (non-nil) or removing (nil) keys, on the Node or (sub
// "status") on its status subresource.
func mergeAnnotations(ctx context.Context, c kubernetes.Interface, node, sub string, set map[string]*string) error {
	data, err := json.Marshal(map[string]any{"metadata": map[string]any{"annotations": set}})
	if err != nil {
		return err
	}
	return mergePatch(ctx, c, node, sub, string(data))
}

func mergePatch(ctx context.Context, c kubernetes.Interface, node, sub, patch string) error {
	var subs []string
	if sub != "" {
		subs = []string{sub}
	}
	_, err := c.CoreV1().Nodes().Patch(ctx, node, types.MergePatchType, []byte(patch), metav1.PatchOptions{}, subs...)
	return err
}

func strategicPatchStatus(ctx context.Context, c kubernetes.Interface, node, patch string) error {
	_, err := c.CoreV1().Nodes().PatchStatus(ctx, node, []byte(patch))
	return err
}

// updateNode is the drain's cordon: read, change, PUT with the read
// resourceVersion, again on a conflict.
func updateNode(ctx context.Context, c kubernetes.Interface, node string, change func(*corev1.Node)) error {
	return retry.RetryOnConflict(retry.DefaultBackoff, func() error {
		n, err := c.CoreV1().Nodes().Get(ctx, node, metav1.GetOptions{})
		if err != nil {
			return err
		}
		if n.Annotations == nil {
			n.Annotations = map[string]string{}
		}
		change(n)
		_, err = c.CoreV1().Nodes().Update(ctx, n, metav1.UpdateOptions{})
		return err
	})
}

// mergeTaints is the health publisher's taint write: the whole list in a
// merge patch carrying the read resourceVersion, again on a conflict.
func mergeTaints(ctx context.Context, c kubernetes.Interface, node string, change func([]corev1.Taint) []corev1.Taint) error {
	return retry.RetryOnConflict(retry.DefaultBackoff, func() error {
		n, err := c.CoreV1().Nodes().Get(ctx, node, metav1.GetOptions{})
		if err != nil {
			return err
		}
		data, err := json.Marshal(map[string]any{
			"metadata": map[string]any{"resourceVersion": n.ResourceVersion},
			"spec":     map[string]any{"taints": change(n.Spec.Taints)},
		})
		if err != nil {
			return err
		}
		return mergePatch(ctx, c, node, "", string(data))
	})
}

func without(ts []corev1.Taint, key string) []corev1.Taint {
	var out []corev1.Taint
	for _, t := range ts {
		if t.Key != key {
			out = append(out, t)
		}
	}
	return out
}

// patchConditionOf is the agent's condition write: a strategic merge patch
// of one condition on nodes/status.
func patchConditionOf(ctx context.Context, c kubernetes.Interface, node string, typ corev1.NodeConditionType, status corev1.ConditionStatus) error {
	now := metav1.Now().UTC().Format(time.RFC3339)
	patch := fmt.Sprintf(`{"status":{"conditions":[{"type":%q,"status":%q,"reason":"Test","lastHeartbeatTime":%q,"lastTransitionTime":%q}]}}`,
		typ, status, now, now)
	return strategicPatchStatus(ctx, c, node, patch)
}

// createEvent records a core v1 Event about a Node, as the agent's recorder
// does.
func createEvent(ctx context.Context, c kubernetes.Interface, ns, node string) (string, error) {
	now := metav1.Now()
	e, err := c.CoreV1().Events(ns).Create(ctx, &corev1.Event{
		ObjectMeta:     metav1.ObjectMeta{GenerateName: node + ".", Namespace: ns},
		InvolvedObject: corev1.ObjectReference{APIVersion: "v1", Kind: "Node", Name: node, UID: types.UID(node)},
		Reason:         "UpdateDraining", Message: "test", Type: corev1.EventTypeNormal,
		Source:         corev1.EventSource{Component: "nodeward-agent", Host: node},
		FirstTimestamp: now, LastTimestamp: now, Count: 1,
	}, metav1.CreateOptions{})
	if err != nil {
		return "", err
	}
	return e.Name, nil
}

func createEventsV1(ctx context.Context, c kubernetes.Interface, node string) error {
	body := fmt.Sprintf(`{"apiVersion":"events.k8s.io/v1","kind":"Event","metadata":{"generateName":"x-"},`+
		`"eventTime":%q,"reportingController":"nodeward.io/agent","reportingInstance":%q,"action":"Drain","reason":"Test","type":"Normal",`+
		`"regarding":{"apiVersion":"v1","kind":"Node","name":%q}}`, metav1.NowMicro().UTC().Format("2006-01-02T15:04:05.000000Z"), node, node)
	return c.CoreV1().RESTClient().Post().AbsPath("/apis/events.k8s.io/v1/namespaces/default/events").
		Body([]byte(body)).SetHeader("Content-Type", "application/json").Do(ctx).Error()
}

func deref(s *string) string {
	if s == nil {
		return "<removed>"
	}
	return *s
}

// admissionPolicy is a ValidatingAdmissionPolicy as the manifests spell it.
type admissionPolicy struct {
	APIVersion string         `json:"apiVersion"`
	Kind       string         `json:"kind"`
	Metadata   map[string]any `json:"metadata"`
	Spec       map[string]any `json:"spec"`
}

// variable returns the expression of the policy's variable name.
func (p admissionPolicy) variable(t *testing.T, name string) string {
	t.Helper()
	vars, _ := p.Spec["variables"].([]any)
	for _, v := range vars {
		if m, ok := v.(map[string]any); ok && m["name"] == name {
			expr, _ := m["expression"].(string)
			return expr
		}
	}
	t.Fatalf("the policy has no variable %s", name)
	return ""
}

// expressions joins every variable and validation expression.
func (p admissionPolicy) expressions() string {
	var out []string
	for _, field := range []string{"variables", "validations"} {
		items, _ := p.Spec[field].([]any)
		for _, item := range items {
			if m, ok := item.(map[string]any); ok {
				expr, _ := m["expression"].(string)
				out = append(out, expr)
			}
		}
	}
	return strings.Join(out, "\n")
}

func (p admissionPolicy) raw(t *testing.T) map[string]any {
	t.Helper()
	data, err := json.Marshal(p)
	if err != nil {
		t.Fatal(err)
	}
	var m map[string]any
	if err := json.Unmarshal(data, &m); err != nil {
		t.Fatal(err)
	}
	return m
}

// decodeManifest finds kind/name among the YAML documents of a file under
// manifests/ and decodes it into into.
func decodeManifest(t *testing.T, rel, kind, name string, into any) {
	t.Helper()
	data, err := os.ReadFile(filepath.Join(manifestsDir(t), rel))
	if err != nil {
		t.Fatal(err)
	}
	for _, doc := range strings.Split(string(data), "\n---\n") {
		var meta struct {
			Kind     string `json:"kind"`
			Metadata struct {
				Name string `json:"name"`
			} `json:"metadata"`
		}
		if err := yaml.Unmarshal([]byte(doc), &meta); err != nil {
			t.Fatalf("%s: %v", rel, err)
		}
		if meta.Kind == kind && meta.Metadata.Name == name {
			if err := yaml.UnmarshalStrict([]byte(doc), into); err != nil {
				t.Fatalf("%s %s/%s: %v", rel, kind, name, err)
			}
			return
		}
	}
	t.Fatalf("%s has no %s/%s", rel, kind, name)
}

// applyObjects server-side applies objects as the admin.
func applyObjects(t *testing.T, cp *cluster.ControlPlane, objs ...any) {
	t.Helper()
	var docs []string
	for _, o := range objs {
		data, err := json.Marshal(o)
		if err != nil {
			t.Fatal(err)
		}
		docs = append(docs, string(data))
	}
	path := filepath.Join(t.TempDir(), "objects.yaml")
	if err := os.WriteFile(path, []byte(strings.Join(docs, "\n---\n")), 0o600); err != nil {
		t.Fatal(err)
	}
	kubectl(t, cp, "apply", "--server-side", "--field-manager=nodeward-test", "-f", path)
}

var celString = regexp.MustCompile(`'([^']*)'`)

// celStrings lists the string literals of a CEL list literal.
func celStrings(t *testing.T, expr string) []string {
	t.Helper()
	var out []string
	for _, m := range celString.FindAllStringSubmatch(expr, -1) {
		out = append(out, m[1])
	}
	return out
}

func requireSameSet(t *testing.T, what string, got, want []string) {
	t.Helper()
	g, w := slices.Sorted(slices.Values(got)), slices.Sorted(slices.Values(want))
	if !slices.Equal(g, w) {
		t.Errorf("%s = %q, want %q", what, g, w)
	}
}

// jsonFields lists the JSON names of a struct's fields.
func jsonFields(v any) []string {
	var out []string
	typ := reflect.TypeOf(v)
	for i := range typ.NumField() {
		name, _, _ := strings.Cut(typ.Field(i).Tag.Get("json"), ",")
		if name != "" && name != "-" {
			out = append(out, name)
		}
	}
	return out
}
