package coordinator_test

import (
	"context"
	"encoding/json"
	"fmt"
	"maps"
	"slices"
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/apimachinery/pkg/watch"
	"k8s.io/client-go/dynamic"

	"github.com/nodeward/nodeward/api/v1alpha1"
	"github.com/nodeward/nodeward/test/cluster"
	"github.com/nodeward/nodeward/test/oracle"
)

// grantEvent is a grant a scripted agent received.
type grantEvent struct{ node, grant, target string }

// agents play the agents of the nodes a label selector matches, leaving
// each update's end to the test: a new target is staged at once; a new
// grant is reported as Draining for it at once (the node is disrupted from
// then on) and sent on grants; report ends it.
type agents struct {
	cp     *cluster.ControlPlane
	grants chan grantEvent
}

func scriptAgents(ctx context.Context, t *testing.T, cp *cluster.ControlPlane, selector string) *agents {
	t.Helper()
	w, err := cp.Client().CoreV1().Nodes().Watch(ctx, metav1.ListOptions{LabelSelector: selector})
	if err != nil {
		t.Fatalf("watch nodes: %v", err)
	}
	a := &agents{cp: cp, grants: make(chan grantEvent, 100)}
	go func() {
		defer w.Stop()
		staged, seen := map[string]string{}, map[string]bool{}
		for ev := range w.ResultChan() {
			node, ok := ev.Object.(*corev1.Node)
			if !ok || ev.Type == watch.Deleted {
				continue
			}
			ann := node.Annotations
			if tgt := ann[v1alpha1.AnnotationTarget]; tgt != "" && ann[v1alpha1.AnnotationStaged] != tgt && staged[node.Name] != tgt {
				staged[node.Name] = tgt
				go func(name string) {
					_ = patchAnnotations(ctx, cp, name, map[string]any{v1alpha1.AnnotationState: v1alpha1.StepStaged,
						v1alpha1.AnnotationStateTarget: tgt, v1alpha1.AnnotationStaged: tgt})
				}(node.Name)
			}
			grant := ann[v1alpha1.AnnotationGrant]
			// Grant names are unique per node only: two leaders may name
			// grants to different nodes alike in the same second.
			if grant == "" || seen[node.Name+"/"+grant] {
				continue
			}
			seen[node.Name+"/"+grant] = true
			g := grantEvent{node: node.Name, grant: grant, target: ann[v1alpha1.AnnotationGrantTarget]}
			if g.target == "" {
				g.target = ann[v1alpha1.AnnotationTarget] // a coordinator that does not write grant-target
			}
			if err := a.report(ctx, g, "Draining"); err != nil && ctx.Err() == nil {
				t.Errorf("agent of %s: report Draining: %v", g.node, err)
			}
			a.grants <- g
		}
	}()
	return a
}

// next waits for the next grant.
func (a *agents) next(t *testing.T, timeout time.Duration) grantEvent {
	t.Helper()
	select {
	case g := <-a.grants:
		return g
	case <-time.After(timeout):
		t.Fatalf("no grant within %s", timeout)
	}
	return grantEvent{}
}

// report writes the agent's state for grant g on its target.
func (a *agents) report(ctx context.Context, g grantEvent, state v1alpha1.Step) error {
	return a.reportFor(ctx, g, state, g.target)
}

func (a *agents) reportFor(ctx context.Context, g grantEvent, state v1alpha1.Step, target string) error {
	return patchAnnotations(ctx, a.cp, g.node, map[string]any{v1alpha1.AnnotationState: state,
		v1alpha1.AnnotationStateTarget: target, v1alpha1.AnnotationStateGrant: g.grant})
}

// mustReport is report failing the test on error.
func (a *agents) mustReport(ctx context.Context, t *testing.T, g grantEvent, state v1alpha1.Step) {
	t.Helper()
	if err := a.report(ctx, g, state); err != nil {
		t.Fatalf("agent of %s: report %s: %v", g.node, state, err)
	}
}

// watchUnavailable asserts at every event of the nodes selector matches
// that at most limit of them are unavailable as the tests' oracle counts
// (oracle.Unavailable): holding a grant their agent has not reported Done
// or Yielded for, in an agent step from the cordon to the uncordon,
// cordoned, or not serving.
func watchUnavailable(ctx context.Context, t *testing.T, cp *cluster.ControlPlane, selector string, limit int) {
	t.Helper()
	w, err := cp.Client().CoreV1().Nodes().Watch(ctx, metav1.ListOptions{LabelSelector: selector})
	if err != nil {
		t.Fatalf("watch nodes: %v", err)
	}
	go func() {
		defer w.Stop()
		latest := map[string]*corev1.Node{}
		for ev := range w.ResultChan() {
			node, ok := ev.Object.(*corev1.Node)
			if !ok {
				continue
			}
			delete(latest, node.Name)
			if ev.Type != watch.Deleted {
				latest[node.Name] = node
			}
			if over := oracle.Unavailable.PoolExcess(slices.Collect(maps.Values(latest)), limit); over != nil {
				down := map[string]string{}
				for _, name := range over.Nodes {
					down[name] = oracle.Unavailable.Why(latest[name]).String()
				}
				t.Errorf("invariant broken: %d nodes of %q unavailable, at most %d allowed: %v", len(down), selector, limit, down)
			}
		}
	}()
}

func getNode(ctx context.Context, t *testing.T, cp *cluster.ControlPlane, name string) *corev1.Node {
	t.Helper()
	n, err := cp.Client().CoreV1().Nodes().Get(ctx, name, metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	return n
}

// waitAnnotation waits until node's annotation key is want ("" absent).
func waitAnnotation(t *testing.T, cp *cluster.ControlPlane, node, key, want string, timeout time.Duration) {
	t.Helper()
	cluster.WaitFor(t, timeout, fmt.Sprintf("node %s: %s=%q", node, key, want), func(ctx context.Context) (bool, error) {
		n, err := cp.Client().CoreV1().Nodes().Get(ctx, node, metav1.GetOptions{})
		if err != nil {
			return false, err
		}
		got := n.Annotations[key]
		return got == want, fmt.Errorf("%s=%q", key, got)
	})
}

// noGrantBut fails the test if a node of nodes other than except holds a
// grant.
func noGrantBut(ctx context.Context, t *testing.T, cp *cluster.ControlPlane, nodes []string, except string, when string) {
	t.Helper()
	for _, n := range nodes {
		if g := getNode(ctx, t, cp, n).Annotations[v1alpha1.AnnotationGrant]; n != except && g != "" {
			t.Errorf("%s: node %s was granted (%s)", when, n, g)
		}
	}
}

// setCondition sets a node condition's status, as the kubelet or the CNI
// would.
func setCondition(ctx context.Context, t *testing.T, cp *cluster.ControlPlane, node string, typ corev1.NodeConditionType, status corev1.ConditionStatus) {
	t.Helper()
	now := metav1.Now()
	patch, _ := json.Marshal(map[string]any{"status": map[string]any{"conditions": []corev1.NodeCondition{{
		Type: typ, Status: status, Reason: "Test", Message: "set by the test", LastHeartbeatTime: now, LastTransitionTime: now}}}})
	if _, err := cp.Client().CoreV1().Nodes().PatchStatus(ctx, node, patch); err != nil {
		t.Fatalf("set %s=%s on %s: %v", typ, status, node, err)
	}
}

// cordon sets spec.unschedulable as an admin would (no nodeward record).
func cordon(ctx context.Context, t *testing.T, cp *cluster.ControlPlane, node string, on bool) {
	t.Helper()
	patch := fmt.Sprintf(`{"spec":{"unschedulable":%v}}`, on)
	if _, err := cp.Client().CoreV1().Nodes().Patch(ctx, node, types.MergePatchType, []byte(patch), metav1.PatchOptions{}); err != nil {
		t.Fatalf("cordon %s=%v: %v", node, on, err)
	}
}

// patchPool merge-patches a pool's spec.
func patchPool(ctx context.Context, t *testing.T, dyn dynamic.Interface, pool string, spec map[string]any) {
	t.Helper()
	patch, _ := json.Marshal(map[string]any{"spec": spec})
	if _, err := dyn.Resource(v1alpha1.UpdatePoolResource()).Patch(ctx, pool, types.MergePatchType, patch, metav1.PatchOptions{}); err != nil {
		t.Fatalf("patch pool %s: %v", pool, err)
	}
}

// waitPoolCondition waits until the message of the pool's condition typ
// contains every one of want.
func waitPoolCondition(t *testing.T, dyn dynamic.Interface, pool, typ string, timeout time.Duration, want ...string) {
	t.Helper()
	cluster.WaitFor(t, timeout, fmt.Sprintf("pool %s condition %s to say %q", pool, typ, want), func(ctx context.Context) (bool, error) {
		c, err := poolCondition(ctx, dyn, pool, typ)
		if err != nil {
			return false, err
		}
		msg, _ := c["message"].(string)
		for _, w := range want {
			if !strings.Contains(msg, w) {
				return false, fmt.Errorf("message %q", msg)
			}
		}
		return true, nil
	})
}

// poolCondition reads the pool's condition typ as the API server has it.
func poolCondition(ctx context.Context, dyn dynamic.Interface, pool, typ string) (map[string]any, error) {
	obj, err := dyn.Resource(v1alpha1.UpdatePoolResource()).Get(ctx, pool, metav1.GetOptions{})
	if err != nil {
		return nil, err
	}
	conds, _, _ := unstructured.NestedSlice(obj.Object, "status", "conditions")
	for _, c := range conds {
		if m, _ := c.(map[string]any); m["type"] == typ {
			return m, nil
		}
	}
	return nil, fmt.Errorf("no condition %s", typ)
}
