package coordinator_test

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	rbacv1 "k8s.io/api/rbac/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/dynamic"
	"k8s.io/utils/ptr"
	"sigs.k8s.io/yaml"

	"github.com/nodeward/nodeward/api/v1alpha1"
	"github.com/nodeward/nodeward/coordinator"
	"github.com/nodeward/nodeward/objectgate"
	"github.com/nodeward/nodeward/test/cluster"
)

// storageClusters is the test CRD standing in for a storage cluster
// (testdata/storageclusters.yaml).
var storageClusters = schema.GroupVersionResource{Group: "test.nodeward.io", Version: "v1", Resource: "storageclusters"}

const healthOK = `object.status.health == "HEALTH_OK"`

// storageRig is a rig of count nodes with the test CRD installed and, in a
// namespace of the test's own, a storage cluster "ceph" at health.
func storageRig(t *testing.T, prefix string, count int, health string) (*rig, string) {
	t.Helper()
	r := newRig(t, prefix, count, 1)
	if err := r.cp.InstallCRDFiles(r.ctx, "coordinator/testdata/storageclusters.yaml"); err != nil {
		t.Fatal(err)
	}
	ns := r.cp.Namespace(t)
	obj := &unstructured.Unstructured{Object: map[string]any{
		"apiVersion": "test.nodeward.io/v1", "kind": "StorageCluster",
		"metadata": map[string]any{"name": "ceph", "namespace": ns},
		"status":   map[string]any{"health": health},
	}}
	if _, err := r.dyn.Resource(storageClusters).Namespace(ns).Create(r.ctx, obj, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	return r, ns
}

// setHealth sets the storage cluster's status.health.
func setHealth(t *testing.T, r *rig, ns, health string) {
	t.Helper()
	api := r.dyn.Resource(storageClusters).Namespace(ns)
	obj, err := api.Get(r.ctx, "ceph", metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	_ = unstructured.SetNestedField(obj.Object, health, "status", "health")
	if _, err := api.Update(r.ctx, obj, metav1.UpdateOptions{}); err != nil {
		t.Fatal(err)
	}
}

// createGatedPool creates pool prefix over the rig's nodes, gated on the
// storage cluster by expr, the gate amended by each of with.
func createGatedPool(t *testing.T, r *rig, prefix, ns, expr string, with ...func(*v1alpha1.ObjectGate)) {
	t.Helper()
	g := v1alpha1.ObjectGate{
		Group: storageClusters.Group, Version: storageClusters.Version, Resource: storageClusters.Resource,
		Namespace: ns, Name: "ceph", Expression: expr, Message: "the storage has not healed",
	}
	for _, f := range with {
		f(&g)
	}
	createPool(t, r.dyn, prefix, &v1alpha1.UpdatePool{ObjectMeta: metav1.ObjectMeta{Name: prefix}, Spec: v1alpha1.UpdatePoolSpec{
		NodeSelector: groupSelector(prefix), OSImage: "os:og1", MaxUnavailable: ptr.To(intstrInt(1)),
		Gates: &v1alpha1.Gates{Objects: []v1alpha1.ObjectGate{g}},
	}})
}

// TestObjectGateWaitsForTheStorageToHeal: an unhealthy storage cluster
// holds the pool with the gate's message, in GatesPassing and in the
// Updating condition; once healthy, every node is granted.
func TestObjectGateWaitsForTheStorageToHeal(t *testing.T) {
	t.Parallel()
	const prefix = "objheal"
	r, ns := storageRig(t, prefix, 2, "HEALTH_WARN")
	createGatedPool(t, r, prefix, ns, healthOK)
	runCoordinator(r.ctx, t, r.cp, r.dyn, prefix)
	msg := waitPoolConditionIs(t, r.dyn, prefix, v1alpha1.PoolGatesPassing, "False", "ObjectGateFailing", time.Minute)
	for _, want := range []string{"the storage has not healed", ns + "/ceph", "gates.objects[0]"} {
		if !strings.Contains(msg, want) {
			t.Errorf("GatesPassing message %q does not say %q", msg, want)
		}
	}
	waitPoolCondition(t, r.dyn, prefix, v1alpha1.PoolUpdating, 30*time.Second, "gates failing", "the storage has not healed")
	r.agents.noGrantFor(t, 3*time.Second, "while the storage is unhealthy")

	setHealth(t, r, ns, "HEALTH_OK")
	for range 2 {
		r.agents.mustReport(r.ctx, t, r.agents.next(t, time.Minute), v1alpha1.StepDone)
	}
	waitUpdated(t, r.cp, r.dyn, prefix, 2, 30*time.Second)
	msg = waitPoolConditionIs(t, r.dyn, prefix, v1alpha1.PoolGatesPassing, "True", "GatesPassing", 30*time.Second)
	if !strings.Contains(msg, "1 object gates passing on 1 objects") {
		t.Errorf("GatesPassing message %q does not count the object gate", msg)
	}
}

// TestObjectGateHoldsWhenTheObjectIsDeleted: the storage cluster is
// healthy and the first node is granted; deleted meanwhile, the next grant
// waits and the status says the object is missing.
func TestObjectGateHoldsWhenTheObjectIsDeleted(t *testing.T) {
	t.Parallel()
	const prefix = "objgone"
	r, ns := storageRig(t, prefix, 2, "HEALTH_OK")
	createGatedPool(t, r, prefix, ns, healthOK)
	runCoordinator(r.ctx, t, r.cp, r.dyn, prefix)
	first := r.agents.next(t, time.Minute)
	if err := r.dyn.Resource(storageClusters).Namespace(ns).Delete(r.ctx, "ceph", metav1.DeleteOptions{}); err != nil {
		t.Fatal(err)
	}
	r.agents.mustReport(r.ctx, t, first, v1alpha1.StepDone)
	msg := waitPoolConditionIs(t, r.dyn, prefix, v1alpha1.PoolGatesPassing, "False", "ObjectMissing", time.Minute)
	if !strings.Contains(msg, "ceph not found") {
		t.Errorf("GatesPassing message %q does not name the missing object", msg)
	}
	r.agents.noGrantFor(t, 3*time.Second, "with the storage cluster gone")
}

// TestObjectGateExpressionNeverTakenForTrue: an expression that does not
// compile, or is not a bool, holds the pool with the CEL error naming the
// pool and the gate, however healthy the object.
func TestObjectGateExpressionNeverTakenForTrue(t *testing.T) {
	t.Parallel()
	testObjectGateVerdicts(t, []objectGateCase{
		{name: "objsyntax", expr: `object.status.health == `, reason: "ObjectExpressionInvalid", want: []string{"does not compile", "Syntax error"}},
		{name: "objnotbool", expr: `object.status.health`, reason: "ObjectExpressionInvalid", want: []string{"does not compile", "want bool"}},
	})
}

// TestObjectGatesFailClosed: a runtime error, a resource not served and
// none matching each hold the pool with a reason that says which; none
// matching passes only with allowNone.
func TestObjectGatesFailClosed(t *testing.T) {
	t.Parallel()
	noMatch := func(g *v1alpha1.ObjectGate) {
		g.Name, g.Selector = "", &metav1.LabelSelector{MatchLabels: map[string]string{"role": "none"}}
	}
	testObjectGateVerdicts(t, []objectGateCase{
		{name: "objruntime", expr: `object.status.missing == "x"`, reason: "ObjectExpressionFailed", want: []string{"/ceph", "no such key"}},
		{name: "objunserved", expr: healthOK, reason: "ObjectsUnreadable", want: []string{"nosuchthings.test.nodeward.io", "listing failed"},
			with: func(g *v1alpha1.ObjectGate) { g.Resource = "nosuchthings" }},
		{name: "objnons", expr: healthOK, reason: "ObjectMissing", want: []string{"ceph not found as a cluster-scoped object", "objnons-", "set the gate's namespace"},
			with: func(g *v1alpha1.ObjectGate) { g.Namespace = "" }},
		{name: "objnone", expr: healthOK, reason: "NoObjectsMatch", want: []string{"no object matches"}, with: noMatch},
		{name: "objallownone", expr: healthOK, reason: "GatesPassing", want: []string{"passing on 0 objects"},
			with: func(g *v1alpha1.ObjectGate) { noMatch(g); g.AllowNone = true }},
	})
}

// objectGateCase is a pool gated on a healthy storage cluster by expr (the
// gate amended by with) and the GatesPassing reason and message it gets.
type objectGateCase struct {
	name, expr, reason string
	want               []string
	with               func(*v1alpha1.ObjectGate)
}

func testObjectGateVerdicts(t *testing.T, cases []objectGateCase) {
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			r, ns := storageRig(t, tc.name, 2, "HEALTH_OK")
			var with []func(*v1alpha1.ObjectGate)
			if tc.with != nil {
				with = append(with, tc.with)
			}
			createGatedPool(t, r, tc.name, ns, tc.expr, with...)
			runCoordinator(r.ctx, t, r.cp, r.dyn, tc.name)
			status := map[bool]string{true: "True", false: "False"}[tc.reason == "GatesPassing"]
			msg := waitPoolConditionIs(t, r.dyn, tc.name, v1alpha1.PoolGatesPassing, status, tc.reason, time.Minute)
			for _, want := range tc.want {
				if !strings.Contains(msg, want) {
					t.Errorf("GatesPassing message %q does not say %q", msg, want)
				}
			}
			if status == "True" {
				r.agents.next(t, 30*time.Second)
				return
			}
			if want := "pool " + tc.name + " gates.objects[0]"; !strings.Contains(msg, want) {
				t.Errorf("GatesPassing message %q does not name %q", msg, want)
			}
			r.agents.noGrantFor(t, 3*time.Second, "with the gate failing closed")
		})
	}
}

// TestObjectGateSaysWhichPermissionIsMissing: a coordinator with the
// shipped ClusterRole's rules only may not list the storage clusters; the
// pool holds and the status names the rule to grant. Granted it, the
// watch lists and the rollout goes on.
func TestObjectGateSaysWhichPermissionIsMissing(t *testing.T) {
	t.Parallel()
	const prefix = "objrbac"
	r, ns := storageRig(t, prefix, 1, "HEALTH_OK")
	createGatedPool(t, r, prefix, ns, healthOK)
	restricted := shippedCoordinatorClient(t, r, "nodeward-objgates-test")
	runCoordinator(r.ctx, t, r.cp, r.dyn, prefix, func(c *coordinator.Config) { c.Dynamic = restricted })
	msg := waitPoolConditionIs(t, r.dyn, prefix, v1alpha1.PoolGatesPassing, "False", "ObjectsForbidden", time.Minute)
	for _, want := range []string{`apiGroups ["test.nodeward.io"] resources ["storageclusters"] verbs [get list watch] in namespace ` + ns, "forbidden"} {
		if !strings.Contains(msg, want) {
			t.Errorf("GatesPassing message %q does not say %q", msg, want)
		}
	}
	r.agents.noGrantFor(t, 3*time.Second, "without the permission to read the gate's objects")

	grantStorageRead(t, r, ns, "nodeward-objgates-test")
	// The reflector retries its list with a backoff of up to 30s.
	waitPoolConditionIs(t, r.dyn, prefix, v1alpha1.PoolGatesPassing, "True", "GatesPassing", 90*time.Second)
	r.agents.mustReport(r.ctx, t, r.agents.next(t, 30*time.Second), v1alpha1.StepDone)
}

// shippedCoordinatorClient is a dynamic client as user, bound to a copy of
// the shipped coordinator ClusterRole's rules (manifests/base): what a
// deployed coordinator may do before an operator grants anything more.
func shippedCoordinatorClient(t *testing.T, r *rig, user string) dynamic.Interface {
	t.Helper()
	role := &rbacv1.ClusterRole{ObjectMeta: metav1.ObjectMeta{Name: user}, Rules: shippedCoordinatorRules(t)}
	binding := &rbacv1.ClusterRoleBinding{ObjectMeta: metav1.ObjectMeta{Name: user},
		RoleRef:  rbacv1.RoleRef{APIGroup: rbacv1.GroupName, Kind: "ClusterRole", Name: user},
		Subjects: []rbacv1.Subject{{APIGroup: rbacv1.GroupName, Kind: rbacv1.UserKind, Name: user}}}
	rbac := r.cp.Client().RbacV1()
	if _, err := rbac.ClusterRoles().Create(r.ctx, role, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	if _, err := rbac.ClusterRoleBindings().Create(r.ctx, binding, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		_ = rbac.ClusterRoleBindings().Delete(context.Background(), user, metav1.DeleteOptions{})
		_ = rbac.ClusterRoles().Delete(context.Background(), user, metav1.DeleteOptions{})
	})
	cfg, err := r.cp.UserConfig(user)
	if err != nil {
		t.Fatal(err)
	}
	dyn, err := dynamic.NewForConfig(cfg)
	if err != nil {
		t.Fatal(err)
	}
	return dyn
}

// grantStorageRead grants user what docs/guardrails.md tells operators to
// grant for a gate on the storage clusters of ns.
func grantStorageRead(t *testing.T, r *rig, ns, user string) {
	t.Helper()
	rbac := r.cp.Client().RbacV1()
	role := &rbacv1.Role{ObjectMeta: metav1.ObjectMeta{Name: "nodeward-gates", Namespace: ns}, Rules: []rbacv1.PolicyRule{{
		APIGroups: []string{storageClusters.Group}, Resources: []string{storageClusters.Resource}, Verbs: []string{"get", "list", "watch"}}}}
	binding := &rbacv1.RoleBinding{ObjectMeta: metav1.ObjectMeta{Name: "nodeward-gates", Namespace: ns},
		RoleRef:  rbacv1.RoleRef{APIGroup: rbacv1.GroupName, Kind: "Role", Name: role.Name},
		Subjects: []rbacv1.Subject{{APIGroup: rbacv1.GroupName, Kind: rbacv1.UserKind, Name: user}}}
	if _, err := rbac.Roles(ns).Create(r.ctx, role, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	if _, err := rbac.RoleBindings(ns).Create(r.ctx, binding, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
}

// shippedCoordinatorRules are the rules of the ClusterRole the manifests
// ship for the coordinator.
func shippedCoordinatorRules(t *testing.T) []rbacv1.PolicyRule {
	t.Helper()
	root, err := cluster.RepoRoot()
	if err != nil {
		t.Fatal(err)
	}
	data, err := os.ReadFile(filepath.Join(root, "manifests", "base", "rbac-coordinator.yaml"))
	if err != nil {
		t.Fatal(err)
	}
	for doc := range strings.SplitSeq(string(data), "\n---\n") {
		var role rbacv1.ClusterRole
		if err := yaml.Unmarshal([]byte(doc), &role); err != nil {
			t.Fatalf("rbac-coordinator.yaml: %v", err)
		}
		if role.Kind == "ClusterRole" {
			return role.Rules
		}
	}
	t.Fatal("rbac-coordinator.yaml has no ClusterRole")
	return nil
}

// TestObjectWatchStopsWhenNoPoolNamesIt: the coordinator watches the
// storage clusters once a pool's gate names them, and stops when the gate
// is removed from the pool.
func TestObjectWatchStopsWhenNoPoolNamesIt(t *testing.T) {
	t.Parallel()
	const prefix = "objwatch"
	r, ns := storageRig(t, prefix, 1, "HEALTH_OK")
	c := runCoordinator(r.ctx, t, r.cp, r.dyn, prefix)
	key := objectgate.Key{Resource: storageClusters, Namespace: ns}
	watching := func(want bool) func(context.Context) (bool, error) {
		return func(context.Context) (bool, error) {
			keys := c.ObjectWatches()
			return slices.Contains(keys, key) == want, fmt.Errorf("watching %v", keys)
		}
	}
	if slices.Contains(c.ObjectWatches(), key) {
		t.Fatal("watching the storage clusters before any pool names them")
	}
	createGatedPool(t, r, prefix, ns, healthOK)
	cluster.WaitFor(t, 30*time.Second, "the storage clusters watched", watching(true))

	patch := []byte(`{"spec":{"gates":null}}`)
	if _, err := r.dyn.Resource(v1alpha1.UpdatePoolResource()).Patch(r.ctx, prefix, types.MergePatchType, patch, metav1.PatchOptions{}); err != nil {
		t.Fatal(err)
	}
	cluster.WaitFor(t, 30*time.Second, "the storage clusters' watch stopped", watching(false))
}
