package update

import (
	"context"
	"encoding/json"
	"io"
	"log/slog"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	policyv1 "k8s.io/api/policy/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/apimachinery/pkg/util/intstr"

	"github.com/nodeward/nodeward/api/kube"
	v1alpha1 "github.com/nodeward/nodeward/api/v1alpha1"
	"github.com/nodeward/nodeward/drain"
	"github.com/nodeward/nodeward/test/cluster"
)

// The tests in this file run the machine against the project's real API
// server: the Node, its annotations, the cordon and the drain are real;
// only the OS, the reboot and the boot ID are the fake world's.

var env cluster.Env

func TestMain(m *testing.M) { os.Exit(env.Run(m)) }

// apiWorld is one real Node driven by a machine whose OS is the fake w.
type apiWorld struct {
	*world
	t      *testing.T
	cp     *cluster.ControlPlane
	client *kube.Client
	name   string
	// wrap, when set, wraps the machine's real workloads.
	wrap func(Workloads) Workloads
}

// newAPIWorld creates a kwok node named prefix-0, booted on os-1.
func newAPIWorld(t *testing.T, prefix string) *apiWorld {
	t.Helper()
	cp := env.ControlPlane(t)
	names := cp.CreateNodes(t, cluster.NodeSpec{Prefix: prefix, Count: 1})
	return &apiWorld{world: newWorld(t, "os-1"), t: t, cp: cp, client: cp.Kube(), name: names[0]}
}

// Node implements NodeSource with a read from the API server.
func (a *apiWorld) Node(ctx context.Context) (*corev1.Node, error) {
	return a.client.Nodes().Get(ctx, a.name, metav1.GetOptions{})
}

// apiMachine builds the machine a fresh agent process would, its state in
// dir, its protocol and its workloads on the real API server.
func (a *apiWorld) apiMachine(dir string) *Machine {
	a.t.Helper()
	discard := slog.New(slog.NewTextHandler(io.Discard, nil))
	workloads, err := NewKubeWorkloads(drain.Config{Client: a.client, Node: a.name, Log: discard})
	if err != nil {
		a.t.Fatal(err)
	}
	var w Workloads = workloads
	if a.wrap != nil {
		w = a.wrap(workloads)
	}
	m, err := NewMachine(Config{
		Store: Store{Path: filepath.Join(dir, "update-state.json")},
		Node:  a, Protocol: &AnnotationProtocol{Client: a.client, Node: a.name},
		OS: a.world, Reboot: a.world, BootID: a.world.BootID, Workloads: w,
		Log: discard, Now: a.world.clock,
		DrainTimeout: time.Minute, DrainAttempt: 5 * time.Second, HealthTimeout: time.Minute, RebootRetry: time.Hour,
	})
	if err != nil {
		a.t.Fatal(err)
	}
	return m
}

// coordinator writes annotations as the coordinator does (nil removes).
func (a *apiWorld) coordinator(set map[string]*string) {
	a.t.Helper()
	if _, err := PatchAnnotations(a.t.Context(), a.client, a.name, set); err != nil {
		a.t.Fatal(err)
	}
}

// grant writes target and a grant issued for it.
func (a *apiWorld) grant(target, grant string) {
	a.coordinator(map[string]*string{v1alpha1.AnnotationTarget: &target,
		v1alpha1.AnnotationGrant: &grant, v1alpha1.AnnotationGrantTarget: &target})
}

func (a *apiWorld) get() *corev1.Node {
	a.t.Helper()
	n, err := a.Node(a.t.Context())
	if err != nil {
		a.t.Fatal(err)
	}
	return n
}

// adminSetUnschedulable patches spec.unschedulable as kubectl cordon and
// uncordon do: a patch under their field manager, false as null.
func (a *apiWorld) adminSetUnschedulable(on bool) {
	a.t.Helper()
	value := any(nil)
	if on {
		value = true
	}
	patch, _ := json.Marshal(map[string]any{"spec": map[string]any{"unschedulable": value}})
	if _, err := a.client.Nodes().Patch(a.t.Context(), a.name, types.StrategicMergePatchType, patch,
		metav1.PatchOptions{FieldManager: "kubectl-cordon"}); err != nil {
		a.t.Fatalf("admin sets unschedulable=%t: %v", on, err)
	}
}

// recreate deletes the Node and creates it again under the same name, as a
// re-registering kubelet would: a new UID, the coordinator's target but no
// grant, no cordon and no record.
func (a *apiWorld) recreate() types.UID {
	a.t.Helper()
	ctx := a.t.Context()
	old := a.get()
	if err := a.client.Nodes().Delete(ctx, a.name, metav1.DeleteOptions{}); err != nil {
		a.t.Fatalf("delete node: %v", err)
	}
	fresh := &corev1.Node{ObjectMeta: metav1.ObjectMeta{Name: a.name, Labels: old.Labels,
		Annotations: map[string]string{cluster.KwokAnnotation: "fake", "node.alpha.kubernetes.io/ttl": "0",
			v1alpha1.AnnotationTarget: old.Annotations[v1alpha1.AnnotationTarget]}},
		Status: corev1.NodeStatus{Capacity: old.Status.Capacity, Allocatable: old.Status.Allocatable}}
	cluster.WaitFor(a.t, 30*time.Second, "node "+a.name+" created again", func(ctx context.Context) (bool, error) {
		_, err := a.client.Nodes().Create(ctx, fresh, metav1.CreateOptions{})
		return err == nil, err // the old object may still be finalizing
	})
	return a.get().UID
}

// A Node deleted and created again while the agent sits in Cordoning holds
// no grant: the agent must not cordon it (it did, then drained it, while
// the coordinator granted another node; the protocol simulator found two
// control-plane nodes disrupted at once).
func TestNodeRecreatedWhileCordoningIsNotCordoned(t *testing.T) {
	t.Parallel()
	a := newAPIWorld(t, "recreate-cordoning")
	a.grant("os-2", "g1")
	m := a.apiMachine(t.TempDir())
	runUntil(t, m, v1alpha1.StepCordoning)
	uid := a.recreate()
	if _, err := m.Advance(t.Context()); err != nil {
		t.Fatalf("advance after the re-creation: %v", err)
	}
	node := a.get()
	if node.UID != uid {
		t.Fatalf("node UID %s, want the re-created %s", node.UID, uid)
	}
	if st := m.State(); node.Spec.Unschedulable || st.Step != v1alpha1.StepStaged || st.Grant != "" {
		t.Fatalf("re-created node without a grant: unschedulable %t, step %s, grant %q; want it left schedulable, Staged without a grant",
			node.Spec.Unschedulable, st.Step, st.Grant)
	}
	a.grant("os-2", "g2") // a grant for the new object is used
	if got := settle(t, m); got != v1alpha1.StepRebooting || !a.get().Spec.Unschedulable {
		t.Fatalf("with a new grant: step %s, want Rebooting, cordoned", got)
	}
}

// An admin who uncordons a node nodeward cordoned, then cordons it again
// (kubectl uncordon, kubectl cordon), owns that cordon, though nodeward's
// record survived both. None of the agent's ways out lifts it: the
// Uncordoning step after the reboot, a fresh agent (state directory lost)
// on a node already on the target, a Degraded agent given a new target.
func TestAdminRecordonIsNotLiftedByTheAgent(t *testing.T) {
	t.Parallel()
	cases := []struct {
		name string
		// after runs the machine on from the admin's cordon; it returns
		// the machine.
		after func(a *apiWorld, dir string) *Machine
	}{
		{"Uncordoning", func(a *apiWorld, dir string) *Machine {
			a.world.boot(false)
			return a.apiMachine(dir)
		}},
		{"StateLost", func(a *apiWorld, _ string) *Machine {
			a.world.boot(false)
			return a.apiMachine(t.TempDir())
		}},
		{"DegradedNewTarget", func(a *apiWorld, dir string) *Machine {
			a.coordinator(map[string]*string{v1alpha1.AnnotationTarget: ptrTo("os-3"),
				v1alpha1.AnnotationGrant: nil, v1alpha1.AnnotationGrantTarget: nil})
			return a.apiMachine(dir)
		}},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			a := newAPIWorld(t, "recordon-"+strings.ToLower(tc.name))
			a.grant("os-2", "g1")
			dir := t.TempDir()
			m := a.apiMachine(dir)
			if got := settle(t, m); got != v1alpha1.StepRebooting || !drain.CordonedByNodeward(a.get()) {
				t.Fatalf("step %s, cordoned by nodeward %t; want Rebooting under nodeward's cordon", got, drain.CordonedByNodeward(a.get()))
			}
			if tc.name == "DegradedNewTarget" {
				a.world.boot(true) // verification fails, the rollback boots, Degraded stays cordoned
				settle(t, a.apiMachine(dir))
				a.world.boot(false)
				if got := settle(t, a.apiMachine(dir)); got != v1alpha1.StepDegraded {
					t.Fatalf("after the rollback: step %s, want Degraded", got)
				}
			}
			a.adminSetUnschedulable(false)
			a.adminSetUnschedulable(true)
			m = tc.after(a, dir)
			settle(t, m)
			if node := a.get(); !node.Spec.Unschedulable {
				t.Fatalf("step %s: the admin's cordon was lifted", m.State().Step)
			}
		})
	}
}

func ptrTo(s string) *string { return &s }

// afterDrain runs then after each drain attempt of the real workloads:
// what the coordinator writes while an attempt runs.
type afterDrain struct {
	Workloads
	then func()
}

func (d afterDrain) Drain(ctx context.Context) error {
	err := d.Workloads.Drain(ctx)
	d.then()
	return err
}

// blockedPod runs one pod of a Deployment on a's node behind a PDB that
// allows no disruption, and returns its name.
func (a *apiWorld) blockedPod(group string) (ns, pod string) {
	a.t.Helper()
	ctx, client := a.t.Context(), a.cp.Client()
	ns = a.cp.Namespace(a.t)
	labels := map[string]string{"app": "pinned"}
	one, grace := int32(1), int64(1)
	if _, err := client.AppsV1().Deployments(ns).Create(ctx, &appsv1.Deployment{
		ObjectMeta: metav1.ObjectMeta{Name: "pinned"},
		Spec: appsv1.DeploymentSpec{Replicas: &one, Selector: &metav1.LabelSelector{MatchLabels: labels},
			Template: corev1.PodTemplateSpec{ObjectMeta: metav1.ObjectMeta{Labels: labels},
				Spec: corev1.PodSpec{NodeSelector: map[string]string{cluster.GroupLabel: group},
					TerminationGracePeriodSeconds: &grace,
					Containers:                    []corev1.Container{{Name: "c", Image: "registry.invalid/app:1"}}}}},
	}, metav1.CreateOptions{}); err != nil {
		a.t.Fatal(err)
	}
	zero := intstr.FromInt32(0)
	if _, err := client.PolicyV1().PodDisruptionBudgets(ns).Create(ctx, &policyv1.PodDisruptionBudget{
		ObjectMeta: metav1.ObjectMeta{Name: "pinned"},
		Spec:       policyv1.PodDisruptionBudgetSpec{MaxUnavailable: &zero, Selector: &metav1.LabelSelector{MatchLabels: labels}},
	}, metav1.CreateOptions{}); err != nil {
		a.t.Fatal(err)
	}
	cluster.WaitFor(a.t, time.Minute, "pinned pod running behind its PDB", func(ctx context.Context) (bool, error) {
		pdb, err := client.PolicyV1().PodDisruptionBudgets(ns).Get(ctx, "pinned", metav1.GetOptions{})
		if err != nil || pdb.Status.CurrentHealthy != 1 || pdb.Status.ObservedGeneration != pdb.Generation {
			return false, err
		}
		pods, err := client.CoreV1().Pods(ns).List(ctx, metav1.ListOptions{FieldSelector: "spec.nodeName=" + a.name})
		if err != nil || len(pods.Items) != 1 {
			return false, err
		}
		pod = pods.Items[0].Name
		return true, nil
	})
	return ns, pod
}

// A pool switched from onTimeout Force to Retry while its node drains:
// the coordinator removes force-on-drain-timeout during a drain attempt,
// and the agent must not force-delete the blocking pod on the policy it
// read before the attempt (it did: the node then rebooted undrained of a
// pod its PDB protected).
func TestDrainPolicySwitchedMidAttemptIsHonoured(t *testing.T) {
	t.Parallel()
	a := newAPIWorld(t, "stale-force")
	ns, pod := a.blockedPod("stale-force")
	a.grant("os-2", "g1")
	a.coordinator(map[string]*string{v1alpha1.AnnotationForceOnDrainTimeout: ptrTo("true"),
		v1alpha1.AnnotationDrainTimeout: ptrTo("1m")})
	switched := false
	a.wrap = func(w Workloads) Workloads {
		return afterDrain{Workloads: w, then: func() {
			if a.world.clock().Sub(time.Unix(1_700_000_000, 0)) > time.Minute && !switched {
				switched = true // the pool's onTimeout is now Retry
				a.coordinator(map[string]*string{v1alpha1.AnnotationForceOnDrainTimeout: nil})
			}
		}}
	}
	m := a.apiMachine(t.TempDir())
	runUntil(t, m, v1alpha1.StepDraining)
	if _, err := m.Advance(t.Context()); err != nil || m.State().Step != v1alpha1.StepDraining {
		t.Fatalf("first attempt: step %s, %v; want Draining, blocked by the PDB", m.State().Step, err)
	}
	a.world.advance(2 * time.Minute) // past the pool's drain timeout
	if _, err := m.Advance(t.Context()); err != nil {
		t.Fatalf("attempt past the timeout: %v", err)
	}
	p, err := a.cp.Client().CoreV1().Pods(ns).Get(t.Context(), pod, metav1.GetOptions{})
	if !switched || err != nil || p.DeletionTimestamp != nil || m.State().Step != v1alpha1.StepDraining {
		t.Fatalf("policy switched %t; pod %s: %v, deleting %t; step %s: want the pod left to its PDB, still Draining",
			switched, pod, err, err == nil && p.DeletionTimestamp != nil, m.State().Step)
	}
}

// A node that reported Done and later booted the old deployment again (a
// rollback by hand, the boot loader's fallback) is checked at the agent's
// start: it stages the target again and waits for a new grant instead of
// reporting Done for an OS it does not run.
func TestDoneIsCheckedAgainstTheBootedOSAtStart(t *testing.T) {
	t.Parallel()
	a := newAPIWorld(t, "done-recheck")
	a.grant("os-2", "g1")
	dir := t.TempDir()
	settle(t, a.apiMachine(dir))
	a.world.boot(false)
	if got := settle(t, a.apiMachine(dir)); got != v1alpha1.StepDone {
		t.Fatalf("after the reboot: step %s, want Done", got)
	}
	a.world.set(func(w *world) { w.booted, w.bootID = "os-1", w.bootID+1 }) // the old deployment boots again
	m := a.apiMachine(dir)
	got := settle(t, m)
	if node := a.get(); got != v1alpha1.StepYielded || node.Annotations[v1alpha1.AnnotationState] == string(v1alpha1.StepDone) ||
		a.world.staged != "os-2" {
		t.Fatalf("Done on os-2 but booted os-1: step %s, reported %q, staged %q; want the target staged again and g1 refused",
			got, node.Annotations[v1alpha1.AnnotationState], a.world.staged)
	}
	a.grant("os-2", "g2")
	if got := settle(t, m); got != v1alpha1.StepRebooting {
		t.Fatalf("with a new grant: step %s, want Rebooting", got)
	}
}
