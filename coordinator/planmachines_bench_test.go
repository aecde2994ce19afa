package coordinator

import (
	"fmt"
	"testing"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/intstr"
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
				n := addStagedBenchNode(index, i, now)
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
