package protosim

import (
	"context"
	"fmt"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/apimachinery/pkg/util/intstr"

	"github.com/nodeward/nodeward/api/v1alpha1"
)

// Scenario sizes one simulated schedule.
type Scenario struct {
	Workers, ControlPlane int
	Zones                 []string
	// FaultEvents is how many events the fault phase lasts; afterwards
	// faults stop and the world must converge within ConvergeEvents.
	FaultEvents, ConvergeEvents int
	// Extended plays the extended mode: pools with gates, soaks, canaries,
	// halts and drain policies, pools deleted and created again, Nodes
	// deleted while their machine reboots, and a pool cache that lags,
	// all drawn from a second stream (World.ext). Off, a seed plays the
	// classic schedule it always played.
	Extended bool
	// Fenced plays the fenced mode on top (fencing.go): grants carry the
	// leader's term, agents check it, and a leader may pause after a plan
	// and write it once another leads; drawn from a third stream.
	Fenced bool
	// Machines plays the machines mode on top (machines.go): Machines
	// beneath the nodes, deleted, replaced and failed, and a machine
	// controller that honours nodeward's pre-drain hook; drawn from a
	// fifth stream.
	Machines bool
}

// DefaultScenario is the size `make test` runs per seed.
func DefaultScenario() Scenario {
	return Scenario{Workers: 6, ControlPlane: 3, Zones: []string{"a", "b", "c"}, FaultEvents: 400, ConvergeEvents: 6000}
}

// ExtendedScenario is DefaultScenario in extended mode.
func ExtendedScenario() Scenario {
	sc := DefaultScenario()
	sc.Extended = true
	return sc
}

// FencedScenario is ExtendedScenario in fenced mode too, which fresh seeds
// play.
func FencedScenario() Scenario {
	sc := ExtendedScenario()
	sc.Fenced = true
	return sc
}

// MachinesScenario is FencedScenario in machines mode too, which fresh
// seeds play with -protosim.machines.
func MachinesScenario() Scenario {
	sc := FencedScenario()
	sc.Machines = true
	return sc
}

// extFaultPercent is how often, in extended mode, a fault-phase event is
// an extended fault (drawn from World.ext before the classic draw).
const extFaultPercent = 4

// Result is one schedule's outcome.
type Result struct {
	Seed uint64
	// Extended, Fenced, Machines: the schedule played those modes.
	Extended   bool
	Fenced     bool
	Machines   bool
	Violations []string
	// Stuck is why the world did not converge once faults stopped ("" when
	// it did).
	Stuck  string
	Events int
	Faults map[string]int
	Trace  []string
}

// Failed reports whether the schedule broke an invariant or did not
// converge.
func (r *Result) Failed() bool { return len(r.Violations) > 0 || r.Stuck != "" }

// FirstFinding is the first thing that went wrong, on one line: the first
// violation, or why the world did not converge ("" when nothing did).
func (r *Result) FirstFinding() string {
	if len(r.Violations) > 0 {
		return r.Violations[0]
	}
	if r.Stuck != "" {
		return "did not converge: " + r.Stuck
	}
	return ""
}

const (
	// finalOS is first used when faults stop, so every node has a target
	// to converge on that nothing failed on.
	fromOS, midOS, otherOS, finalOS = "os-1", "os-2", "os-3", "os-4"
	workerPool, workerPoolB         = "workers", "workers-b"
	cpPool                          = "control-plane"
	poolLabel                       = "pool"
)

// Run plays one seeded schedule.
func Run(seed uint64, sc Scenario) *Result {
	w := newWorld(seed, sc.Extended)
	if sc.Fenced {
		w.fence = newFenceStream(seed)
		w.kubelet = newKubeletStream(seed)
	}
	if sc.Machines {
		w.mach = &machineWorld{rng: newMachineStream(seed), hookIdle: map[string]int{}}
	}
	w.setup(sc)
	res := &Result{Seed: seed, Extended: sc.Extended, Fenced: sc.Fenced, Machines: sc.Machines,
		Faults: map[string]int{}}
	for i := 0; i < sc.FaultEvents; i++ {
		if w.mach != nil && w.mach.rng.IntN(100) < machineFaultPercent {
			res.Faults[w.machineFault()]++
		} else if w.fence != nil && w.fence.IntN(100) < fenceFaultPercent {
			res.Faults[w.fenceFault()]++
		} else if w.ext != nil && w.ext.IntN(100) < extFaultPercent {
			res.Faults[w.extFault()]++
		} else if w.rng.IntN(100) < 12 {
			res.Faults[w.fault()]++
		} else {
			w.step()
		}
		res.Events++
		w.checkSteady()
	}
	w.healFaults()
	for i := 0; i < sc.ConvergeEvents; i++ {
		w.step()
		res.Events++
		w.checkSteady()
		if i%50 == 0 && w.converged(finalOS) == "" {
			break
		}
	}
	res.Stuck = w.converged(finalOS)
	if res.Stuck != "" && w.x != nil {
		w.logPools()
	}
	res.Violations, res.Trace = w.violations, w.trace
	return res
}

func (w *World) setup(sc Scenario) {
	for i := range sc.ControlPlane {
		w.addNode(fmt.Sprintf("cp-%d", i), map[string]string{
			"node-role.kubernetes.io/control-plane": "", "topology.kubernetes.io/zone": sc.Zones[i%len(sc.Zones)]}, fromOS)
	}
	for i := range sc.Workers {
		w.addNode(fmt.Sprintf("w-%d", i), map[string]string{
			poolLabel: workerPool, "topology.kubernetes.io/zone": sc.Zones[i%len(sc.Zones)]}, fromOS)
	}
	w.pools[workerPool] = newPool(workerPool, map[string]string{poolLabel: workerPool}, intstr.FromInt32(2), false)
	w.pools[workerPoolB] = newPool(workerPoolB, map[string]string{poolLabel: workerPoolB}, intstr.FromInt32(1), false)
	w.pools[cpPool] = newPool(cpPool, map[string]string{"node-role.kubernetes.io/control-plane": ""}, intstr.FromString("50%"), true)
	for _, name := range []string{workerPool, workerPoolB, cpPool} {
		w.bumpPool(w.pools[name])
	}
	if w.x != nil {
		w.setupExt()
	}
	if w.mach != nil {
		w.setupMachines()
	}
	w.coord = newCoordinator(w)
}

func newPool(name string, sel map[string]string, mu intstr.IntOrString, cp bool) *v1alpha1.UpdatePool {
	return &v1alpha1.UpdatePool{
		ObjectMeta: metav1.ObjectMeta{Name: name, UID: types.UID("pool-" + name), Generation: 1},
		Spec: v1alpha1.UpdatePoolSpec{
			NodeSelector: &metav1.LabelSelector{MatchLabels: sel}, OSImage: midOS, MaxUnavailable: &mu, ControlPlane: cp,
			Drain: &v1alpha1.DrainSpec{Timeout: "3m", OnTimeout: "Yield"},
		},
	}
}

// step is one ordinary event: an agent turns, the coordinator plans, its
// cache catches up, a requested reboot happens, or time passes.
func (w *World) step() {
	if w.mach != nil && w.mach.rng.IntN(100) < machineTurnPercent {
		w.machineTurn()
		return
	}
	switch r := w.rng.IntN(100); {
	case r < 45:
		w.agentTurn(w.names[w.rng.IntN(len(w.names))])
	case r < 60:
		w.coord.reconcile()
	case r < 72:
		w.coord.refresh()
	case r < 84:
		w.rebootRequested()
	default:
		w.now = w.now.Add(time.Duration(1+w.rng.IntN(20)) * time.Second)
	}
}

// agentTurn runs one step of node's agent, if it runs, and renews its Lease.
func (w *World) agentTurn(name string) {
	a := w.agents[name]
	if a == nil || a.machine == nil {
		return
	}
	if _, ok := w.nodes[name]; !ok {
		return
	}
	w.agentSeen[name] = w.now
	if w.registering[name] && !w.hosts[name].rebootAsked {
		n := w.nodes[name]
		n.Status.Conditions = []corev1.NodeCondition{{Type: corev1.NodeReady, Status: corev1.ConditionTrue}}
		w.bump(n)
		delete(w.registering, name)
		if w.kubelet != nil && w.kubelet.IntN(2) == 0 {
			w.logf("%s: kubelet reports Ready before the agent reports on the new Node", name)
			return
		}
	}
	before := a.machine.State().Step
	if _, err := a.machine.Advance(context.Background()); err != nil {
		w.logf("%s: %s: %v", name, before, err)
	}
	if after := a.machine.State().Step; after != before {
		w.logf("%s: %s → %s %s", name, before, after, a.machine.State().Reason)
	}
}

// rebootRequested reboots one host whose agent asked for it.
func (w *World) rebootRequested() {
	for _, name := range w.names {
		if h := w.hosts[name]; h.rebootAsked {
			w.logf("%s: reboots (planned)", name)
			h.reboot()
			w.agents[name].start()
			w.registerAfterBoot(name)
			return
		}
	}
}

// healFaults ends the fault phase: the API answers, PDBs allow evictions,
// admins uncordon, hooks are removed, pools resume on a target that boots,
// every node is Ready and in the pool it started in.
func (w *World) healFaults() {
	w.healed = true
	w.resumePaused()
	if w.x != nil {
		w.healExt()
	}
	w.apiFailRate = 0
	clear(w.pdbBlocked)
	clear(w.registering)
	for name := range w.adminCordoned {
		if n := w.nodes[name]; n != nil {
			n.Spec.Unschedulable = false
			w.bump(n)
		}
	}
	clear(w.adminCordoned)
	for _, n := range w.nodes {
		for k := range n.Annotations {
			if hasHookPrefix(k) {
				delete(n.Annotations, k)
			}
		}
		n.Status.Conditions = []corev1.NodeCondition{{Type: corev1.NodeReady, Status: corev1.ConditionTrue}}
		w.bump(n)
	}
	for _, h := range w.hosts {
		clear(h.brokenTargets)
		h.failNextBoot = false
	}
	for _, p := range w.pools {
		one := intstr.FromInt32(1)
		p.Spec.Paused, p.Spec.OSImage, p.Spec.MaxUnavailable = false, finalOS, &one
		w.specEdited(p)
	}
	for _, name := range w.names {
		if _, ok := w.nodes[name]; !ok {
			w.recreateNode(name)
		}
		if w.agents[name].machine == nil {
			w.agents[name].start()
		}
	}
	w.logf("faults healed; target %s", finalOS)
}

func hasHookPrefix(key string) bool {
	return len(key) > len(v1alpha1.PreDrainHookPrefix) && key[:len(v1alpha1.PreDrainHookPrefix)] == v1alpha1.PreDrainHookPrefix ||
		len(key) > len(v1alpha1.PreRebootHookPrefix) && key[:len(v1alpha1.PreRebootHookPrefix)] == v1alpha1.PreRebootHookPrefix
}
