package e2e

import (
	"context"
	"io"
	"os"
	"slices"
	"testing"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/apimachinery/pkg/util/intstr"
	"k8s.io/utils/ptr"

	v1alpha1 "github.com/nodeward/nodeward/api/v1alpha1"
	"github.com/nodeward/nodeward/test/cluster"
	"github.com/nodeward/nodeward/test/coordinatortest"
	"github.com/nodeward/nodeward/test/rpmostree"
	"github.com/nodeward/nodeward/test/sim"
)

// TestDigestPinnedTargetNeitherDrainsNorReboots: after a rollout, the
// pool's target is pinned to the digest of the image its nodes booted.
// That is the OS they run: every node reaches Done on the new target with
// no cordon, no drain, no finalize and no boot.
func TestDigestPinnedTargetNeitherDrainsNorReboots(t *testing.T) {
	t.Parallel()
	p := newProcPool(t, "pdigest", 2, 1)
	dyn := installPoolAPI(t, p.cp)
	p.startAgents()
	bin, _ := procBinaries()
	cmd := bin.Coordinator(p.cp.KubeconfigPath(), "--pool-selector", coordinatortest.PoolLabel+"=pdigest",
		"--leader-election-namespace", p.cp.Namespace(t))
	cmd.Stdout, cmd.Stderr = io.Discard, io.Discard
	if testing.Verbose() {
		cmd.Stderr = os.Stderr
	}
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = cmd.Process.Kill(); _ = cmd.Wait() })
	p.createPool(dyn, v1alpha1.UpdatePoolSpec{OSImage: sim.ProcTarget, MaxUnavailable: ptr.To(intstr.FromInt(1))})
	p.waitAllDone(3 * time.Minute)
	for _, name := range p.names {
		p.assertUpdated(name)
	}
	before := map[string]int{}
	for _, name := range p.names {
		before[name] = len(p.steps(name))
	}
	pinned := "ostree-unverified-registry:quay.io/fedora/fedora-coreos@" + sim.ProcImages()["quay.io/fedora/fedora-coreos:42"].Digest
	patch := []byte(`{"spec":{"osImage":"` + pinned + `"}}`)
	if _, err := dyn.Resource(v1alpha1.UpdatePoolResource()).Patch(context.Background(), "pdigest", types.MergePatchType, patch, metav1.PatchOptions{}); err != nil {
		t.Fatal(err)
	}
	for _, name := range p.names {
		cluster.WaitFor(t, 2*time.Minute, name+" Done on the pinned target", func(ctx context.Context) (bool, error) {
			n, err := p.node(ctx, name)
			if err != nil {
				return false, err
			}
			return n.Annotations[v1alpha1.AnnotationState] == string(v1alpha1.StepDone) &&
				n.Annotations[v1alpha1.AnnotationTarget] == pinned && n.Annotations[v1alpha1.AnnotationGrant] == "", nil
		})
	}
	for _, name := range p.names {
		s, err := rpmostree.Load(p.procs[name].Double.Dir)
		if err != nil {
			t.Fatal(err)
		}
		finalizes := s.CallCount("finalize-deployment", "rebase")
		steps := p.steps(name)[before[name]:]
		if s.Boots != 1 || finalizes != 2 || slices.Contains(steps, v1alpha1.StepCordoning) && slices.Contains(steps, v1alpha1.StepDraining) ||
			slices.Contains(steps, v1alpha1.StepRebooting) {
			t.Errorf("%s: %d boots, %d rebase and finalize calls in all, steps since the pin %v; want the first update's boot, rebase and finalize only, no drain or reboot",
				name, s.Boots, finalizes, steps)
		}
		n, err := p.node(context.Background(), name)
		if err != nil {
			t.Fatal(err)
		}
		if n.Spec.Unschedulable {
			t.Errorf("%s: left unschedulable", name)
		}
	}
}
