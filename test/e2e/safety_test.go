package e2e

import (
	"context"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/fields"

	v1alpha1 "github.com/nodeward/nodeward/api/v1alpha1"
	"github.com/nodeward/nodeward/daemon/update"
	"github.com/nodeward/nodeward/test/cluster"
)

// Regression tests of the safety review's agent-side fixes, against the
// real API server: each one broke an update before.

func annotate(t *testing.T, p *pool, name string, kv map[string]any) {
	t.Helper()
	patchNode(t, p, name, map[string]any{"metadata": map[string]any{"annotations": kv}})
}

// holdHealth keeps name's post-reboot check failing until the returned
// flag is set.
func holdHealth(p *pool, name string) *atomic.Bool {
	var healthy atomic.Bool
	p.nodes[name].Check = func(ctx context.Context, n *corev1.Node) (bool, string, error) {
		if !healthy.Load() {
			return false, "held by the test", nil
		}
		return update.Serving(ctx, n)
	}
	return &healthy
}

// TestUnplannedRebootWhileStagedStagesAgain: the locked staged deployment
// is lost in a power cut while the node waits for its slot; the agent
// stages again, and the update then finishes with one planned reboot.
func TestUnplannedRebootWhileStagedStagesAgain(t *testing.T) {
	t.Parallel()
	p := newPool(t, "powercut", poolOptions{count: 1})
	name := p.names[0]
	host := p.nodes[name].Host
	annotate(t, p, name, map[string]any{v1alpha1.AnnotationTarget: toOS})
	p.startAgents()
	p.waitStep(name, v1alpha1.StepStaged, time.Minute)
	p.nodes[name].Kill()
	host.PowerCut()
	if host.Staged() != "" {
		t.Fatal("the power cut kept the staged deployment")
	}
	if err := p.nodes[name].Start(); err != nil {
		t.Fatal(err)
	}
	cluster.WaitFor(t, time.Minute, "the target staged again", func(context.Context) (bool, error) {
		return host.Staged() == toOS, nil
	})
	p.grant(toOS, 1, 0)
	p.waitAllDone(2 * time.Minute)
	p.assertUpdated(name)
}

// TestGrantForAnotherTargetIsRefused: a grant whose grant-target is not the
// staged target is never used: the agent gives it back at once (Yielded,
// which the coordinator releases), with no cordon, no reboot, and a reason
// that says why.
func TestGrantForAnotherTargetIsRefused(t *testing.T) {
	t.Parallel()
	p := newPool(t, "granttarget", poolOptions{count: 1})
	name := p.names[0]
	annotate(t, p, name, map[string]any{v1alpha1.AnnotationTarget: toOS,
		v1alpha1.AnnotationGrant: "stale", v1alpha1.AnnotationGrantTarget: fromOS})
	p.startAgents()
	p.waitReason(name, "issued for target")
	n, err := p.node(context.Background(), name)
	if err != nil {
		t.Fatal(err)
	}
	if n.Spec.Unschedulable || p.nodes[name].Host.Reboots() != 0 || n.Annotations[v1alpha1.AnnotationState] != string(v1alpha1.StepYielded) ||
		n.Annotations[v1alpha1.AnnotationStateGrant] != "stale" {
		t.Fatalf("grant for another target: unschedulable %v reboots %d state %s; want Yielded for it, untouched",
			n.Spec.Unschedulable, p.nodes[name].Host.Reboots(), n.Annotations[v1alpha1.AnnotationState])
	}
}

// TestStateLossAfterTheRebootReleasesTheSlot: the agent's state directory
// is lost after the reboot; the agent finds the node on the target, keeps
// the grant so that Done releases it, and lifts nodeward's cordon.
func TestStateLossAfterTheRebootReleasesTheSlot(t *testing.T) {
	t.Parallel()
	p := newPool(t, "stateloss", poolOptions{count: 1})
	name := p.names[0]
	healthy := holdHealth(p, name)
	p.startAgents()
	p.grant(toOS, 1, 0)
	p.waitStep(name, v1alpha1.StepWaitingHealthy, 2*time.Minute)
	p.nodes[name].Kill()
	p.nodes[name].StateDir = t.TempDir() // the old state is gone
	healthy.Store(true)
	if err := p.nodes[name].Start(); err != nil {
		t.Fatal(err)
	}
	p.waitStep(name, v1alpha1.StepDone, time.Minute)
	cluster.WaitFor(t, 30*time.Second, "the grant released", func(ctx context.Context) (bool, error) {
		n, err := p.node(ctx, name)
		return err == nil && n.Annotations[v1alpha1.AnnotationGrant] == "", err
	})
	p.assertUpdated(name)
}

// TestMalformedAnnotationDoesNotFreezeTheUpdate: a bad drain-timeout
// written while the node is down for its update: the agent finishes,
// uncordons, reports Done, and says what was wrong in a Warning Event.
func TestMalformedAnnotationDoesNotFreezeTheUpdate(t *testing.T) {
	t.Parallel()
	p := newPool(t, "badannot", poolOptions{count: 1})
	name := p.names[0]
	healthy := holdHealth(p, name)
	p.startAgents()
	p.grant(toOS, 1, 0)
	p.waitStep(name, v1alpha1.StepWaitingHealthy, 2*time.Minute)
	annotate(t, p, name, map[string]any{v1alpha1.AnnotationDrainTimeout: "abc"})
	healthy.Store(true)
	p.waitStep(name, v1alpha1.StepDone, time.Minute)
	p.assertUpdated(name)
	cluster.WaitFor(t, 30*time.Second, "a BadCoordinatorAnnotation Event naming the key", func(ctx context.Context) (bool, error) {
		events, err := p.cp.Client().CoreV1().Events(metav1.NamespaceDefault).List(ctx, metav1.ListOptions{
			FieldSelector: fields.Set{"involvedObject.name": name, "reason": "BadCoordinatorAnnotation"}.String()})
		if err != nil {
			return false, err
		}
		for _, e := range events.Items {
			if strings.Contains(e.Message, v1alpha1.AnnotationDrainTimeout) {
				return true, nil
			}
		}
		return false, nil
	})
}
