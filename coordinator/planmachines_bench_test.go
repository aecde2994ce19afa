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

// BenchmarkPlanPassMachines is BenchmarkPlanPass at 10,000 nodes with the
// machine index the controller holds: empty (no Machine API served: what
// every cluster without one pays) and with a Machine under every node, ten
// of them being deleted (maxUnavailable 11: one grant, as
// BenchmarkPlanPass's one at maxUnavailable 1). BenchmarkPlanPass passes a
// nil index.
func BenchmarkPlanPassMachines(b *testing.B) {
	const count, deleting = 10000, 10
	for _, served := range []bool{false, true} {
		b.Run(fmt.Sprintf("machines=%v", served), func(b *testing.B) {
			const target = "quay.io/os:2"
			// One slot free either way: ten of eleven taken by the
			// deleting Machines' nodes where they are served.
			p := pool(intstr.FromInt32(1))
			if served {
				p = pool(intstr.FromInt32(deleting + 1))
			}
			p.Spec.NodeSelector = &metav1.LabelSelector{MatchLabels: map[string]string{"group": "bench"}}
			index, machines := newNodeIndex(), newMachineIndex()
			now := time.Now()
			for i := range count {
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
				if served {
					r := machineRecord{key: "machine.openshift.io/ns/m-" + n.Name, api: "machine.openshift.io", namespace: "ns",
						name: "m-" + n.Name, node: n.Name}
					if i%(count/deleting) == 0 {
						r.deleting, r.problem = true, "machine ns/"+r.name+" is being deleted"
					}
					machines.records[r.key] = r
				}
			}
			machines.rebuild()
			benchPlanPasses(b, p, index, machines, now)
		})
	}
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
