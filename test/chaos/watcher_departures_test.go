package chaos

import (
	"maps"
	"reflect"
	"slices"
	"strconv"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/apimachinery/pkg/util/intstr"
	"k8s.io/apimachinery/pkg/watch"
	"k8s.io/utils/ptr"

	v1alpha1 "github.com/nodeward/nodeward/api/v1alpha1"
)

// The watcher's tests of what it counts beyond the Nodes it sees (departed
// and soaking nodes), of grants from a deleted pool, and of the drain
// policy check.

// remove delivers the deletion of a node.
func (h *watcherHarness) remove(name string) {
	h.rv++
	n := h.nodes[name].DeepCopy()
	n.ResourceVersion = strconv.Itoa(h.rv)
	delete(h.nodes, name)
	h.w.nodeEvent(watch.Deleted, n)
}

// register creates a node of name again, as its kubelet does: a new UID,
// labels, no annotation, Ready as ready says.
func (h *watcherHarness) register(name string, labels map[string]string, ready bool) {
	h.nodes[name] = &corev1.Node{ObjectMeta: metav1.ObjectMeta{Name: name, UID: types.UID(name + "-" + strconv.Itoa(h.rv)),
		Labels: labels, Annotations: map[string]string{}}}
	h.setReady(name, ready)
}

func (h *watcherHarness) setReady(name string, ready bool) {
	status := corev1.ConditionFalse
	if ready {
		status = corev1.ConditionTrue
	}
	h.change(name, func(n *corev1.Node) {
		n.Status.Conditions = []corev1.NodeCondition{{Type: corev1.NodeReady, Status: status}}
	})
}

func (h *watcherHarness) release(name string) {
	h.set(name, map[string]*string{keyGrant: nil, keyGrantPool: nil, keySoakUntil: nil})
}

// poolSpec delivers a pool with a spec of its own.
func (h *watcherHarness) poolSpec(name string, t watch.EventType, spec v1alpha1.UpdatePoolSpec) {
	h.t.Helper()
	p := &v1alpha1.UpdatePool{
		TypeMeta:   metav1.TypeMeta{APIVersion: v1alpha1.GroupName + "/" + v1alpha1.Version, Kind: "UpdatePool"},
		ObjectMeta: metav1.ObjectMeta{Name: name},
		Spec:       spec,
	}
	obj, err := runtime.DefaultUnstructuredConverter.ToUnstructured(p)
	if err != nil {
		h.t.Fatal(err)
	}
	h.w.poolEvent(t, &unstructured.Unstructured{Object: obj})
}

func specA(onTimeout string) v1alpha1.UpdatePoolSpec {
	return v1alpha1.UpdatePoolSpec{NodeSelector: &metav1.LabelSelector{MatchLabels: inA}, OSImage: "os-2",
		MaxUnavailable: ptr.To(intstr.FromInt(1)), Drain: &v1alpha1.DrainSpec{Timeout: "6s", OnTimeout: onTimeout}}
}

// A Node deleted while it holds an unfinished grant keeps its slot until
// a Node of its name registers again and serves; one deleted after Done
// does not.
func TestWatcherDepartedNodeCounts(t *testing.T) {
	h := newWatcherHarness(t)
	h.pool("a", inA, 1, false)
	for _, n := range []string{"n1", "n2", "n3", "n4"} {
		h.node(n, maps.Clone(inA))
	}
	h.grant("n1", "g1", "a")
	h.step("n1", "Verifying", "g1")
	h.remove("n1")
	h.grant("n2", "g2", "a")
	h.expect(VMaxUnavailable)
	if v := h.w.Violations()[0]; !slices.Equal(v.Nodes, []string{"n2", "n1"}) {
		t.Fatalf("violation %v: want n2 (the new grant) and n1 (departed)", v)
	}
	h.release("n2")
	// Registered again (no grant, no cordon) but not Ready yet: counted.
	h.register("n1", maps.Clone(inA), false)
	// The agent's report from before the reboot lands on the new Node: not
	// a reboot without a drain.
	h.step("n1", "Rebooting", "g1")
	h.grant("n3", "g3", "a")
	h.expect(VMaxUnavailable, VMaxUnavailable)
	h.release("n3")
	// Its agent finishes and the Node serves: free.
	h.step("n1", "Done", "g1")
	h.setReady("n1", true)
	h.grant("n3", "g4", "a")
	h.expect(VMaxUnavailable, VMaxUnavailable)
	// n3 finishes and its Node is deleted: nothing to count.
	h.step("n3", "Done", "g4")
	h.remove("n3")
	h.grant("n4", "g5", "a")
	h.expect(VMaxUnavailable, VMaxUnavailable)
	if st := h.w.Stats(); st.Departures != 1 {
		t.Fatalf("%d departures, want 1 (n1; n3 had finished)", st.Departures)
	}
}

// A Node registered again and Ready before the machine's agent reported on
// it is not the machine back: the agent may yet report a step mid-update
// (chaos seed 808547352).
func TestWatcherDepartureOutlivesAnUnreportedReadyNode(t *testing.T) {
	h := newWatcherHarness(t)
	h.pool("a", inA, 1, false)
	for _, n := range []string{"n1", "n2", "n3"} {
		h.node(n, maps.Clone(inA))
	}
	h.grant("n1", "g1", "a")
	h.step("n1", "Verifying", "g1")
	h.remove("n1")
	h.register("n1", maps.Clone(inA), true)
	h.grant("n2", "g2", "a")
	h.expect(VMaxUnavailable)
	h.release("n2")
	h.step("n1", "Done", "g1")
	h.grant("n3", "g3", "a")
	h.expect(VMaxUnavailable)
}

// A deletion and a registration seen only as a new UID (a watch gap
// hid the deletion) count the same; so does a control-plane node against
// the cluster-wide cap.
func TestWatcherDepartedControlPlaneAcrossGap(t *testing.T) {
	h := newWatcherHarness(t)
	h.pool("cp", map[string]string{"pool": "cp"}, 1, true)
	cp := map[string]string{"pool": "cp", controlPlaneLabel: ""}
	h.node("m1", maps.Clone(cp))
	h.node("m2", maps.Clone(cp))
	h.grant("m1", "g1", "cp")
	h.step("m1", "Verifying", "g1")
	h.register("m1", maps.Clone(cp), false) // a new UID, the old one's deletion unseen
	h.expect()
	h.grant("m2", "g2", "cp")
	h.expect(VMaxUnavailable, VControlPlane)
}

// A node soaking (or baking) after Done holds its slot in the pool that
// granted it until it is released, and only there.
func TestWatcherSoakingNodeCounts(t *testing.T) {
	h := newWatcherHarness(t)
	inB := map[string]string{"pool": "b"}
	h.pool("a", inA, 1, false)
	h.pool("b", inB, 1, false)
	h.node("n1", maps.Clone(inA))
	h.node("n2", maps.Clone(inA))
	h.node("n3", maps.Clone(inB))
	h.grant("n1", "g1", "a")
	h.step("n1", "Done", "g1")
	until := "2026-01-01T12:00:03Z"
	h.set("n1", map[string]*string{keySoakUntil: &until})
	h.change("n1", func(n *corev1.Node) { n.Labels["pool"] = "b" })
	h.advance(10 * time.Second)
	h.grant("n3", "g3", "b")
	h.expect()
	h.grant("n2", "g2", "a")
	h.expect(VMaxUnavailable)
	h.release("n2")
	h.release("n1")
	h.grant("n2", "g4", "a")
	h.expect(VMaxUnavailable)
}

// A pool deleted and created again: the new pool of that name counts the
// nodes holding the old one's grants; nothing grants in its name while it
// is gone.
func TestWatcherRecreatedPool(t *testing.T) {
	h := newWatcherHarness(t)
	h.pool("a", inA, 1, false)
	for _, n := range []string{"n1", "n2", "n3"} {
		h.node(n, maps.Clone(inA))
	}
	h.grant("n1", "g1", "a")
	h.step("n1", "Draining", "g1")
	h.poolSpec("a", watch.Deleted, specA("Retry"))
	h.advance(time.Second)
	h.grant("n2", "g2", "a") // planned before the deletion
	h.expect()
	h.release("n2")
	h.advance(10 * time.Second)
	h.grant("n2", "g3", "a")
	h.expect(VGrantOfNoPool)
	h.release("n2")
	h.poolSpec("a", watch.Added, specA("Retry"))
	h.grant("n3", "g4", "a")
	h.expect(VGrantOfNoPool, VMaxUnavailable)
}

// A PDB-blocked pod gone at the reboot, its blocker in place, is a
// violation only when the pool said Retry throughout, give or take the
// policy grace.
func TestWatcherForcedUnderRetry(t *testing.T) {
	h := newWatcherHarness(t)
	h.poolSpec("a", watch.Added, specA("Force"))
	h.node("n1", maps.Clone(inA))
	h.grant("n1", "g1", "a")
	h.w.Pinned("n1", "u1")
	h.advance(10 * time.Second)
	h.w.checkPins("n1", nil, h.now) // Force: may go
	h.expect()
	h.poolSpec("a", watch.Modified, specA("Retry"))
	h.advance(5 * time.Second)
	h.w.Pinned("n1", "u2")
	h.advance(10 * time.Second)
	h.w.checkPins("n1", nil, h.now) // Force 15 s ago: within the grace
	h.expect()
	h.advance(40 * time.Second)
	h.w.Pinned("n1", "u3")
	h.w.Pinned("n1", "u4")
	h.advance(10 * time.Second)
	pods := []corev1.Pod{{ObjectMeta: metav1.ObjectMeta{UID: "u4"}}}
	h.w.checkPins("n1", pods, h.now) // u3 forced under Retry; u4 still bound
	h.expect(VForcedUnderRetry)
	if got := slices.Collect(maps.Keys(h.w.pins)); !reflect.DeepEqual(got, []string{"u4"}) {
		t.Fatalf("pins left %v, want u4", got)
	}
	h.w.Unpinned("u4")
	h.w.checkPins("n1", nil, h.now)
	h.expect(VForcedUnderRetry)
	if st := h.w.Stats(); st.PinsForced != 2 {
		t.Fatalf("%d pins forced under Force, want 2 (u1, u2)", st.PinsForced)
	}
}

// halt sets (or, with "", removes) a pool's halt annotation and delivers
// the change.
func (h *watcherHarness) halt(pool, value string) {
	p := h.pools[pool]
	if value == "" {
		delete(p.Annotations, keyHalted)
	} else {
		if p.Annotations == nil {
			p.Annotations = map[string]string{}
		}
		p.Annotations[keyHalted] = value
	}
	h.deliverPool(pool, watch.Modified)
}

// A grant for the config a pool is halted for is a violation from the
// halt's resourceVersion to the resume's, however late the pool watch
// delivers either; a grant for another config (the target changed), one
// written before the halt, and one after the resume are not.
func TestWatcherGrantWhileHalted(t *testing.T) {
	h := newWatcherHarness(t)
	h.pool("a", inA, 5, false)
	for _, n := range []string{"n1", "n2", "n3", "n4", "n5"} {
		h.node(n, maps.Clone(inA))
	}
	h.grant("n1", "nodeward-0123456789ab-1700000000-1", "a")
	h.halt("a", "nodeward-0123456789ab:gate failed while n1 soaked")
	h.grant("n2", "nodeward-ffffffffffff-1700000001-2", "a") // another config: the target changed
	h.expect()
	h.grant("n3", "nodeward-0123456789ab-1700000002-3", "a")
	h.halt("a", "")
	h.grant("n4", "nodeward-0123456789ab-1700000003-4", "a")
	h.expect(VHaltIgnored)
	if v := h.w.Violations()[0]; !slices.Equal(v.Nodes, []string{"n3"}) {
		t.Fatalf("violation %v: want n3", v)
	}

	// The pool watch delivers the halt after the node watch delivered a
	// grant written after it: judged by resourceVersion, still a violation.
	h.rv++ // the halt's write
	halted := h.rv
	h.grant("n5", "nodeward-0123456789ab-1700000004-5", "a")
	p := *h.pools["a"]
	p.Annotations = map[string]string{keyHalted: "nodeward-0123456789ab:late"}
	p.ResourceVersion = strconv.Itoa(halted)
	obj, err := runtime.DefaultUnstructuredConverter.ToUnstructured(&p)
	if err != nil {
		t.Fatal(err)
	}
	h.w.poolEvent(watch.Modified, &unstructured.Unstructured{Object: obj})
	h.expect(VHaltIgnored, VHaltIgnored)
	if st := h.w.Stats(); st.Halts != 2 {
		t.Errorf("%d halts counted, want 2", st.Halts)
	}
}

// A halt removed in a watch gap ends, for the watcher, where the pool was
// last seen before the gap; one that began in the gap, where it was seen
// after it.
func TestWatcherHaltAcrossGap(t *testing.T) {
	h := newWatcherHarness(t)
	h.pool("a", inA, 2, false)
	h.node("n1", maps.Clone(inA))
	h.node("n2", maps.Clone(inA))
	h.halt("a", "nodeward-0123456789ab:gate failed")
	h.rv += 5 // the resume, unseen
	h.grant("n1", "nodeward-0123456789ab-1700000000-1", "a")
	// The relist shows the pool without its halt.
	h.rv++
	p := *h.pools["a"]
	p.Annotations = nil
	p.ResourceVersion = strconv.Itoa(h.rv)
	obj, err := runtime.DefaultUnstructuredConverter.ToUnstructured(&p)
	if err != nil {
		t.Fatal(err)
	}
	h.w.replacePools([]runtime.Object{&unstructured.Unstructured{Object: obj}}, true)
	h.expect()
}
