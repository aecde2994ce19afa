package sim

import (
	"context"
	"encoding/json"
	"fmt"
	"sort"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/kubernetes"

	"github.com/nodeward/nodeward/api/v1alpha1"
)

// Granter is a deliberately simple stand-in coordinator speaking the agent's
// annotation protocol for one group of nodes: it publishes the target,
// grants at most MaxUnavailable slots to staged nodes and takes a grant back
// when its node reports Done or Yielded. It is not the coordinator: it has no
// zones, no leader election and no pool status; tests use it only where
// the coordinator is not under test.
type Granter struct {
	Client         kubernetes.Interface
	Selector       string // label selector of the pool's nodes
	Target         string
	MaxUnavailable int
	YieldAfter     time.Duration // >0: ask agents to yield after a blocked drain this long
	// YieldBackoff keeps a node that yielded from a new grant for a while
	// so that the others get the slot (default 10 s).
	YieldBackoff time.Duration

	yielded map[string]time.Time
}

// Run reconciles every interval until ctx ends.
func (g *Granter) Run(ctx context.Context, interval time.Duration) {
	grants := 0
	g.yielded = map[string]time.Time{}
	if g.YieldBackoff <= 0 {
		g.YieldBackoff = 10 * time.Second
	}
	for {
		_ = g.reconcile(ctx, &grants) // an error is retried next round
		select {
		case <-ctx.Done():
			return
		case <-time.After(interval):
		}
	}
}

// reconcile is one round: every node of the pool brought up to date (its
// target and drain policy written, a finished grant taken back), then new
// grants to staged nodes while fewer than MaxUnavailable are held.
func (g *Granter) reconcile(ctx context.Context, grants *int) error {
	list, err := g.Client.CoreV1().Nodes().List(ctx, metav1.ListOptions{LabelSelector: g.Selector})
	if err != nil {
		return err
	}
	nodes := list.Items
	sort.Slice(nodes, func(i, j int) bool { return nodes[i].Name < nodes[j].Name })
	held := 0
	for i := range nodes {
		holds, err := g.update(ctx, &nodes[i])
		if err != nil {
			return err
		}
		if holds {
			held++
		}
	}
	for i := range nodes {
		if held >= g.MaxUnavailable {
			break
		}
		if !g.grantable(&nodes[i]) {
			continue
		}
		*grants++
		if err := g.grant(ctx, nodes[i].Name, fmt.Sprintf("g%d", *grants)); err != nil {
			return err
		}
		held++
	}
	return nil
}

// update writes what n lacks of the pool's target and drain policy and
// takes back its grant once finished; it reports whether n still holds a
// grant.
func (g *Granter) update(ctx context.Context, n *corev1.Node) (holds bool, err error) {
	set := g.policyPatch(n.Annotations)
	holds = g.settleGrant(n, set)
	if len(set) > 0 {
		err = g.patch(ctx, n.Name, set)
	}
	return holds, err
}

// policyPatch is the annotations a node needs for the pool's target and,
// with YieldAfter, its yield-on-drain-timeout policy.
func (g *Granter) policyPatch(a map[string]string) map[string]*string {
	set := map[string]*string{}
	if a[v1alpha1.AnnotationTarget] != g.Target {
		set[v1alpha1.AnnotationTarget] = &g.Target
	}
	if g.YieldAfter > 0 && a[v1alpha1.AnnotationYieldOnDrainTimeout] != "true" {
		yes, d := "true", g.YieldAfter.String()
		set[v1alpha1.AnnotationYieldOnDrainTimeout], set[v1alpha1.AnnotationDrainTimeout] = &yes, &d
	}
	return set
}

// settleGrant adds to set the release of n's grant when its agent reported
// Done (for any grant) or Yielded for it on the target, remembers a yield
// for the back-off, and reports whether n keeps a grant.
func (g *Granter) settleGrant(n *corev1.Node, set map[string]*string) bool {
	a := n.Annotations
	grant, granted := a[v1alpha1.AnnotationGrant]
	if !granted {
		return false
	}
	step := v1alpha1.Step(a[v1alpha1.AnnotationState])
	finished := a[v1alpha1.AnnotationStateTarget] == g.Target && a[v1alpha1.AnnotationStateGrant] == grant &&
		(step == v1alpha1.StepDone || step == v1alpha1.StepYielded)
	if finished && step == v1alpha1.StepYielded {
		g.yielded[n.Name] = time.Now()
	}
	if finished || step == v1alpha1.StepDone {
		set[v1alpha1.AnnotationGrant], set[v1alpha1.AnnotationGrantTarget] = nil, nil // release
		return false
	}
	return true
}

// grantable reports whether n may get a new grant: it holds none, it
// reports the target staged, and it did not yield within YieldBackoff.
func (g *Granter) grantable(n *corev1.Node) bool {
	a := n.Annotations
	_, granted := a[v1alpha1.AnnotationGrant]
	return !granted && a[v1alpha1.AnnotationState] == string(v1alpha1.StepStaged) &&
		a[v1alpha1.AnnotationStateTarget] == g.Target && time.Since(g.yielded[n.Name]) >= g.YieldBackoff
}

// grant writes grant id, for the pool's target, on node.
func (g *Granter) grant(ctx context.Context, node, id string) error {
	return g.patch(ctx, node, map[string]*string{v1alpha1.AnnotationGrant: &id, v1alpha1.AnnotationGrantTarget: &g.Target})
}

func (g *Granter) patch(ctx context.Context, node string, set map[string]*string) error {
	patch, err := json.Marshal(map[string]any{"metadata": map[string]any{"annotations": set}})
	if err != nil {
		return err
	}
	_, err = g.Client.CoreV1().Nodes().Patch(ctx, node, types.MergePatchType, patch, metav1.PatchOptions{})
	return err
}
