package coordinator

import (
	"fmt"
	"iter"
	"testing"
	"time"

	coordinationv1 "k8s.io/api/coordination/v1"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/intstr"

	"github.com/nodeward/nodeward/api/v1alpha1"
)

// BenchmarkPlanPass is the CPU of one reconcile's pure part at scale: the
// plan input from the cached pools and nodes, then the plan, for one pool
// over all nodes, as test/bench/coordinator drives it (every node staged,
// one slot), read from the node index with the views kept between passes
// as the controller keeps them. The API writes are not in it.
func BenchmarkPlanPass(b *testing.B) {
	for _, count := range []int{5000, 10000} {
		b.Run(fmt.Sprintf("nodes=%d", count), func(b *testing.B) {
			p := pool(intstr.FromInt32(1))
			p.Spec.NodeSelector = &metav1.LabelSelector{MatchLabels: map[string]string{"group": "bench"}}
			now := time.Now()
			index := newNodeIndex()
			for i := range count {
				addStagedBenchNode(index, i, now)
			}
			benchPlanPasses(b, p, index, nil, now)
		})
	}
}

// addStagedBenchNode adds node i of the plan benchmarks to index: Ready,
// staged for quay.io/os:2, in one of ten zones, its agent's Lease renewed
// at now; it returns the node.
func addStagedBenchNode(index *nodeIndex, i int, now time.Time) *corev1.Node {
	const target = "quay.io/os:2"
	n := &corev1.Node{
		ObjectMeta: metav1.ObjectMeta{Name: fmt.Sprintf("bench-%05d", i), ResourceVersion: "1",
			Labels: map[string]string{"group": "bench", "topology.kubernetes.io/zone": fmt.Sprintf("zone-%d", i%10)},
			Annotations: map[string]string{v1alpha1.AnnotationTarget: target, v1alpha1.AnnotationStaged: target,
				v1alpha1.AnnotationState: string(v1alpha1.StepStaged), v1alpha1.AnnotationStateTarget: target}},
		Status: corev1.NodeStatus{Conditions: []corev1.NodeCondition{{Type: corev1.NodeReady, Status: corev1.ConditionTrue}}},
	}
	index.setNode(n)
	index.setLease(&coordinationv1.Lease{ObjectMeta: metav1.ObjectMeta{Name: v1alpha1.AgentLeaseName(n.Name)},
		Spec: coordinationv1.LeaseSpec{RenewTime: &metav1.MicroTime{Time: now}}})
	return n
}

// benchPlanPasses times plan passes of p over index, as Controller.input
// and planPool make them, each expected to grant one node.
func benchPlanPasses(b *testing.B, p *v1alpha1.UpdatePool, index *nodeIndex, machines *machineIndex, now time.Time) {
	pools := []*v1alpha1.UpdatePool{p}
	cache := newViewCache()
	b.ReportAllocs()
	for b.Loop() {
		views := cache.pass(p.Name)
		var in planInput
		var err error
		index.read(views.slot, now, func(listed iter.Seq[listedNode]) {
			in, _, err = buildInputWith(views, machines, p, pools, listed, map[string]bool{}, map[string]bool{}, now)
		})
		views.done(in.nodes)
		if err != nil {
			b.Fatal(err)
		}
		plan, err := planPool(in)
		if err != nil {
			b.Fatal(err)
		}
		if len(plan.grant) != 1 {
			b.Fatalf("granted %v, want one node", plan.grant)
		}
	}
}
