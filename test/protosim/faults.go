package protosim

import (
	"slices"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/util/intstr"

	"github.com/nodeward/nodeward/api/v1alpha1"
	"github.com/nodeward/nodeward/test/oracle"
)

// fault injects one fault chosen at random and returns its kind.
func (w *World) fault() string {
	faults := []struct {
		kind string
		do   func(node string)
	}{
		{"agent kill -9", w.killAgent},
		{"state directory lost", w.loseState},
		{"power cut", w.powerCut},
		{"API failures on/off", func(string) { w.apiFailRate = []float64{0, 0.2, 0.5}[w.rng.IntN(3)] }},
		{"coordinator failover", func(string) { w.failover() }},
		{"relabel between worker pools", w.relabel},
		{"maxUnavailable changed", func(string) { w.editLimit() }},
		{"target changed", func(string) { w.editTarget() }},
		{"pool paused/resumed", func(string) { w.togglePause() }},
		{"node deleted and re-created", w.recreateNode},
		{"Ready flapped", w.flapReady},
		{"kubelet condition flapped", w.flapCondition},
		{"admin cordon/uncordon", w.adminCordon},
		{"hook added/removed", w.toggleHook},
		{"pod bound to a cordoned node", w.bindLatePod},
		{"PDB blocks/allows", func(n string) { w.pdbBlocked[n] = !w.pdbBlocked[n] }},
		{"failed boot next", func(n string) { w.hosts[n].failNextBoot = true }},
		{"broken target", func(n string) { w.hosts[n].brokenTargets[midOS] = true }},
	}
	f := faults[w.rng.IntN(len(faults))]
	node := w.names[w.rng.IntN(len(w.names))]
	w.logf("FAULT %s (%s)", f.kind, node)
	f.do(node)
	return f.kind
}

func (w *World) killAgent(node string) {
	w.agents[node].start() // a new process from the persisted state
}

func (w *World) loseState(node string) {
	w.agents[node].store = &memStore{}
	w.agents[node].start()
}

func (w *World) powerCut(node string) {
	w.hosts[node].reboot()
	w.hosts[node].rebootAsked = false
	w.agents[node].start()
	w.registerAfterBoot(node)
}

// bindLatePod is a scheduler acting on a stale cache: it binds a pod to a
// node already cordoned (and maybe drained), which undoes the drain.
func (w *World) bindLatePod(node string) {
	if n := w.nodes[node]; n != nil && n.Spec.Unschedulable {
		delete(w.drained, node)
	}
}

func (w *World) relabel(node string) {
	n := w.nodes[node]
	if n == nil || oracle.IsControlPlane(n) {
		return
	}
	if n.Labels[poolLabel] == workerPool {
		n.Labels[poolLabel] = workerPoolB
	} else {
		n.Labels[poolLabel] = workerPool
	}
	w.bump(n)
}

func (w *World) randomPool() *v1alpha1.UpdatePool {
	names := []string{workerPool, workerPoolB, cpPool}
	return w.pools[names[w.rng.IntN(len(names))]]
}

func (w *World) editLimit() {
	p := w.randomPool()
	limits := []intstr.IntOrString{intstr.FromInt32(0), intstr.FromInt32(1), intstr.FromInt32(2), intstr.FromInt32(3),
		intstr.FromString("0%"), intstr.FromString("50%"), intstr.FromString("100%")}
	mu := limits[w.rng.IntN(len(limits))]
	if p == nil {
		return // deleted (extended mode)
	}
	p.Spec.MaxUnavailable = &mu
	w.specEdited(p)
	w.logf("pool %s maxUnavailable %s", p.Name, mu.String())
}

func (w *World) editTarget() {
	p := w.randomPool()
	target := []string{midOS, otherOS, fromOS}[w.rng.IntN(3)]
	if p == nil {
		return // deleted (extended mode)
	}
	p.Spec.OSImage = target
	w.specEdited(p)
	w.logf("pool %s target %s", p.Name, p.Spec.OSImage)
}

func (w *World) togglePause() {
	p := w.randomPool()
	if p == nil {
		return // deleted (extended mode)
	}
	p.Spec.Paused = !p.Spec.Paused
	w.specEdited(p)
}

// recreateNode deletes the Node object and creates it again, as a kubelet
// re-registering would: a new UID, its labels, no annotations, no cordon,
// and NotReady until the kubelet's first status (the next turn of the
// node's agent while the machine is up).
func (w *World) recreateNode(node string) {
	old := w.nodes[node]
	delete(w.nodes, node)
	if old == nil {
		return
	}
	if w.x != nil {
		w.x.deletedByUID[old.UID] = old
	}
	labels := map[string]string{}
	for k, v := range old.Labels {
		labels[k] = v
	}
	w.nodes[node] = w.newNodeObject(node, labels, corev1.ConditionFalse)
	w.registering[node] = true
	delete(w.adminCordoned, node)
}

func (w *World) flapReady(node string) {
	n := w.nodes[node]
	if n == nil {
		return
	}
	for i := range n.Status.Conditions {
		if n.Status.Conditions[i].Type == corev1.NodeReady {
			if n.Status.Conditions[i].Status == corev1.ConditionTrue {
				n.Status.Conditions[i].Status = corev1.ConditionFalse
			} else {
				n.Status.Conditions[i].Status = corev1.ConditionTrue
			}
		}
	}
	w.bump(n)
}

// flapCondition toggles one of the conditions that take a node out of
// service besides Ready (the kubelet's DiskPressure, the CNI's
// NetworkUnavailable, a nodeward health condition).
func (w *World) flapCondition(node string) {
	n := w.nodes[node]
	if n == nil {
		return
	}
	types := []corev1.NodeConditionType{corev1.NodeDiskPressure, corev1.NodeNetworkUnavailable, v1alpha1.ConditionMemoryPressure}
	t := types[w.rng.IntN(len(types))]
	for i := range n.Status.Conditions {
		if n.Status.Conditions[i].Type == t {
			n.Status.Conditions = slices.Delete(n.Status.Conditions, i, i+1)
			w.bump(n)
			return
		}
	}
	n.Status.Conditions = append(n.Status.Conditions, corev1.NodeCondition{Type: t, Status: corev1.ConditionTrue})
	w.bump(n)
}

// adminCordon cordons a schedulable node as kubectl would (no record), or
// uncordons one the admin cordoned.
func (w *World) adminCordon(node string) {
	n := w.nodes[node]
	if n == nil {
		return
	}
	switch {
	case w.adminCordoned[node]:
		n.Spec.Unschedulable = false
		delete(w.adminCordoned, node)
	case !n.Spec.Unschedulable:
		n.Spec.Unschedulable = true
		w.adminCordoned[node] = true
	default:
		return
	}
	w.bump(n)
}

func (w *World) toggleHook(node string) {
	n := w.nodes[node]
	if n == nil {
		return
	}
	key := v1alpha1.PreDrainHookPrefix + "quorum"
	if w.rng.IntN(2) == 0 {
		key = v1alpha1.PreRebootHookPrefix + "detach"
	}
	if _, ok := n.Annotations[key]; ok {
		delete(n.Annotations, key)
	} else {
		n.Annotations[key] = "test-owner"
	}
	w.bump(n)
}
