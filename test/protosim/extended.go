package protosim

import (
	"fmt"
	"maps"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/apimachinery/pkg/util/intstr"

	"github.com/nodeward/nodeward/api/v1alpha1"
)

// extWorld is what the extended mode models besides the classic world:
// the pools' guardrails (gates, soaks, canaries, halts, drain policies),
// pools deleted and created again, and Nodes deleted while their machine
// reboots. Every draw it makes comes from World.ext.
type extWorld struct {
	// gateSick marks the pools whose gates mostly fail; a fault flips it,
	// and each evaluation draws its verdict anew.
	gateSick map[string]bool
	// deletedPools are the pools deleted and not created again yet.
	deletedPools map[string]*v1alpha1.UpdatePool
	poolUIDs     int
	// unregistered are the machines whose Node was deleted: the kubelet
	// registers a new Node, with these labels, when the machine next
	// boots.
	unregistered map[string]map[string]string
	// departed are the Node objects deleted while their machine was
	// disrupted under a grant (the object as it was), until a Node of the
	// name serves again: the machine counts as disrupted meanwhile.
	departed map[string]*corev1.Node
	// deletedByUID are the deleted Node objects in their final state: a
	// watch delivers that with the delete (a relist's tombstone carries
	// the cached copy instead).
	deletedByUID map[types.UID]*corev1.Node
}

func newExtWorld() *extWorld {
	return &extWorld{gateSick: map[string]bool{}, deletedPools: map[string]*v1alpha1.UpdatePool{},
		unregistered: map[string]map[string]string{}, departed: map[string]*corev1.Node{},
		deletedByUID: map[types.UID]*corev1.Node{}}
}

var poolNames = []string{workerPool, workerPoolB, cpPool}

// setupExt gives the pools their first guardrails, drawn from ext.
func (w *World) setupExt() {
	for _, name := range poolNames {
		p := w.pools[name]
		p.Annotations = map[string]string{}
		if w.ext.IntN(3) == 0 {
			w.setSoak(p)
		}
		if w.ext.IntN(3) == 0 {
			w.setCanary(p)
		}
		if w.ext.IntN(3) == 0 {
			p.Spec.Gates = &v1alpha1.Gates{Prometheus: "http://prometheus.monitoring:9090"}
		}
	}
}

// extFault injects one extended fault, drawn from ext, and returns its
// kind.
func (w *World) extFault() string {
	faults := []struct {
		kind string
		do   func(p *v1alpha1.UpdatePool)
	}{
		{"gates turn sick/healthy", func(p *v1alpha1.UpdatePool) { w.x.gateSick[p.Name] = !w.x.gateSick[p.Name] }},
		{"gates added/removed", w.toggleGates},
		{"soak changed", w.setSoak},
		{"canary changed", w.setCanary},
		{"drain policy changed", w.setDrainPolicy},
		{"operator resumes", w.resume},
		{"pool deleted", w.deletePool},
		{"pool re-created", func(*v1alpha1.UpdatePool) { w.recreatePool() }},
		{"node deleted while rebooting", func(*v1alpha1.UpdatePool) { w.deleteRebootingNode() }},
	}
	f := faults[w.ext.IntN(len(faults))]
	p := w.pools[poolNames[w.ext.IntN(len(poolNames))]]
	name := "no pool"
	if p != nil {
		name = p.Name
	}
	w.logf("FAULT %s (%s)", f.kind, name)
	if p != nil || f.kind == "pool re-created" || f.kind == "node deleted while rebooting" {
		f.do(p)
	}
	return f.kind
}

// specEdited records an edit of p's spec: the generation moves.
func (w *World) specEdited(p *v1alpha1.UpdatePool) {
	if p != nil {
		p.Generation++
		w.bumpPool(p)
	}
}

func (w *World) toggleGates(p *v1alpha1.UpdatePool) {
	if p.Spec.Gates != nil {
		p.Spec.Gates = nil
	} else {
		p.Spec.Gates = &v1alpha1.Gates{Prometheus: "http://prometheus.monitoring:9090"}
	}
	w.specEdited(p)
}

func (w *World) setSoak(p *v1alpha1.UpdatePool) {
	p.Spec.Soak = []string{"", "0s", "20s", "2m"}[w.ext.IntN(4)]
	w.specEdited(p)
	w.logf("pool %s soak %q", p.Name, p.Spec.Soak)
}

// setCanary sets a canary of one node, of half the pool, of zone a's
// nodes, or of a selector that matches nothing; or removes it.
func (w *World) setCanary(p *v1alpha1.UpdatePool) {
	one, half := intstr.FromInt32(1), intstr.FromString("50%")
	canaries := []*v1alpha1.Canary{nil,
		{Nodes: &one, Bake: "30s"},
		{Nodes: &half, Bake: "1m"},
		{Selector: &metav1.LabelSelector{MatchLabels: map[string]string{"topology.kubernetes.io/zone": "a"}}, Bake: "30s"},
		{Selector: &metav1.LabelSelector{MatchLabels: map[string]string{"canary": "none"}}, Bake: "30s"},
	}
	p.Spec.Canary = canaries[w.ext.IntN(len(canaries))]
	w.specEdited(p)
	w.logf("pool %s canary %s", p.Name, describeCanary(p.Spec.Canary))
}

func describeCanary(c *v1alpha1.Canary) string {
	switch {
	case c == nil:
		return "none"
	case c.Selector != nil:
		return metav1.FormatLabelSelector(c.Selector) + " bake " + c.Bake
	}
	return c.Nodes.String() + " bake " + c.Bake
}

func (w *World) setDrainPolicy(p *v1alpha1.UpdatePool) {
	p.Spec.Drain = &v1alpha1.DrainSpec{Timeout: []string{"3m", "1m"}[w.ext.IntN(2)],
		OnTimeout: []string{"Yield", "Force", "Retry"}[w.ext.IntN(3)]}
	w.specEdited(p)
	w.logf("pool %s drain %s on timeout %s", p.Name, p.Spec.Drain.Timeout, p.Spec.Drain.OnTimeout)
}

// resume is `nodeward resume`: the halt removed, the pool unpaused.
func (w *World) resume(p *v1alpha1.UpdatePool) {
	if _, ok := p.Annotations[v1alpha1.AnnotationHalted]; ok {
		p.Annotations = maps.Clone(p.Annotations)
		delete(p.Annotations, v1alpha1.AnnotationHalted)
	}
	if p.Spec.Paused {
		p.Spec.Paused = false
		w.specEdited(p)
	}
}

// deletePool deletes p: at once without finalizers, else marked for
// deletion until its finalizers are removed (the coordinator's, once the
// grants the pool recorded settle).
func (w *World) deletePool(p *v1alpha1.UpdatePool) {
	if len(p.Finalizers) > 0 {
		// The API marks it; it goes when its finalizers are removed
		// (writePool).
		if p.DeletionTimestamp == nil {
			at := metav1.NewTime(w.now)
			p.DeletionTimestamp = &at
			w.bumpPool(p)
			w.logf("pool %s being deleted (finalizers %v)", p.Name, p.Finalizers)
		}
		return
	}
	w.removePool(p)
}

// removePool is a pool's deletion completed: the API has it no more.
// Once the faults are healed it is created again at once, as an operator
// would, so that the world converges.
func (w *World) removePool(p *v1alpha1.UpdatePool) {
	delete(w.pools, p.Name)
	w.x.deletedPools[p.Name] = p
	w.logf("pool %s deleted", p.Name)
	if w.healed {
		w.recreatePool()
	}
}

// recreatePool creates a deleted pool again: its name and spec, a new
// UID, no annotations.
func (w *World) recreatePool() {
	for _, name := range poolNames {
		old := w.x.deletedPools[name]
		if old == nil {
			continue
		}
		delete(w.x.deletedPools, name)
		w.x.poolUIDs++
		p := &v1alpha1.UpdatePool{ObjectMeta: metav1.ObjectMeta{Name: name, Generation: 1, Annotations: map[string]string{},
			UID: types.UID(fmt.Sprintf("pool-%s-%d", name, w.x.poolUIDs))}, Spec: old.Spec}
		w.bumpPool(p)
		w.pools[name] = p
		w.logf("pool %s created again (%s)", name, p.UID)
		return
	}
}

// deleteRebootingNode deletes the Node of a machine that reboots (asked
// for its reboot), or of any machine when none does: the machine goes on,
// and its kubelet registers a new Node when it next boots.
func (w *World) deleteRebootingNode() {
	var rebooting []string
	for _, name := range w.names {
		if w.hosts[name].rebootAsked && w.nodes[name] != nil {
			rebooting = append(rebooting, name)
		}
	}
	if len(rebooting) == 0 {
		rebooting = w.names
	}
	name := rebooting[w.ext.IntN(len(rebooting))]
	old := w.nodes[name]
	if old == nil {
		return
	}
	delete(w.nodes, name)
	w.x.deletedByUID[old.UID] = old
	w.x.unregistered[name] = maps.Clone(old.Labels)
	delete(w.adminCordoned, name)
	if rule.Counts(old) && w.machineTookGrant(name) {
		w.x.departed[name] = old
	}
	w.logf("node %s deleted (machine rebooting: %v)", name, w.hosts[name].rebootAsked)
}

// machineTookGrant reports whether the machine name is mid-update: its
// agent's state (running, else as its state directory keeps it) holds a
// slot, or its reboot is asked for. A Node deleted under a grant whose
// agent had not taken it is no departure: the agent checks the grant and
// the Node's UID before every step that disrupts, so a grant on a deleted
// object is never taken (a deposed leader's grant, written after the
// current leader listed the Node, is the one a leader cannot see; protocol
// simulator seed 7700004905).
func (w *World) machineTookGrant(name string) bool {
	if w.hosts[name].rebootAsked {
		return true
	}
	a := w.agents[name]
	st := a.store.st
	if a.machine != nil {
		st = a.machine.State()
	}
	return st.Step.HoldsSlot()
}

// registerAfterBoot registers a new Node for a machine whose Node was
// deleted, as its kubelet does when the machine boots.
func (w *World) registerAfterBoot(name string) {
	if w.x == nil {
		return
	}
	labels, ok := w.x.unregistered[name]
	if !ok {
		return
	}
	delete(w.x.unregistered, name)
	w.nodes[name] = w.newNodeObject(name, labels, corev1.ConditionFalse)
	w.registering[name] = true
	w.logf("%s: kubelet registers a new Node", name)
}

// machinesBack forgets the departed machines whose Node serves again and
// carries the agent's report (until the agent reports, the machine may be
// mid-update under the departed grant).
func (w *World) machinesBack() {
	for name := range w.x.departed {
		if n := w.nodes[name]; n != nil && v1alpha1.NotServing(n) == "" && n.Annotations[v1alpha1.AnnotationState] != "" {
			delete(w.x.departed, name)
		}
	}
}

// healExt ends the extended faults: deleted pools and Nodes come back,
// halts are resumed, gates pass, canary selectors are dropped (nodes
// relabelled between the worker pools may have left a pool with none of
// the nodes its selector names: the pool halts, as it must) and soaks are
// short, so that the world converges.
func (w *World) healExt() {
	for range poolNames {
		w.recreatePool()
	}
	for _, name := range w.names {
		w.registerAfterBoot(name)
	}
	clear(w.x.gateSick)
	for _, p := range w.pools {
		w.resume(p)
		if c := p.Spec.Canary; c != nil && c.Selector != nil {
			p.Spec.Canary = nil
		}
		if p.Spec.Soak == "2m" {
			p.Spec.Soak = "20s"
		}
		w.specEdited(p)
	}
}

// logPools traces each pool's spec and annotations, for a schedule that
// did not converge.
func (w *World) logPools() {
	for _, name := range poolNames {
		p := w.pools[name]
		if p == nil {
			w.logf("pool %s: deleted", name)
			continue
		}
		w.logf("pool %s (%s, generation %d): target %s paused %v soak %q canary %s gates %v drain %+v annotations %v",
			name, p.UID, p.Generation, p.Spec.OSImage, p.Spec.Paused, p.Spec.Soak, describeCanary(p.Spec.Canary),
			p.Spec.Gates != nil, p.Spec.Drain, p.Annotations)
	}
	for _, name := range w.sortedNames() {
		n := w.nodes[name]
		a := n.Annotations
		w.logf("node %s %v: %s for %q grant %q of %q soak-until %q cordoned %v", name, n.Labels,
			a[v1alpha1.AnnotationState], a[v1alpha1.AnnotationStateTarget], a[v1alpha1.AnnotationGrant],
			a[v1alpha1.AnnotationGrantPool], a[v1alpha1.AnnotationSoakUntil], n.Spec.Unschedulable)
	}
}
