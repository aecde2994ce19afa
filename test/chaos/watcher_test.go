package chaos

import (
	"maps"
	"reflect"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/util/intstr"
	"k8s.io/apimachinery/pkg/watch"
	"k8s.io/utils/ptr"

	v1alpha1 "github.com/nodeward/nodeward/api/v1alpha1"
)

// The watcher's own tests: each violation kind is caught from a sequence
// of Node and UpdatePool events, and the legitimate look-alikes are not.

type watcherHarness struct {
	t     *testing.T
	w     *Watcher
	now   time.Time
	rv    int
	nodes map[string]*corev1.Node
	pools map[string]*v1alpha1.UpdatePool
}

func newWatcherHarness(t *testing.T) *watcherHarness {
	h := &watcherHarness{t: t, now: time.Date(2026, 1, 1, 12, 0, 0, 0, time.UTC), nodes: map[string]*corev1.Node{},
		pools: map[string]*v1alpha1.UpdatePool{}}
	h.w = NewWatcher(WatcherOptions{Now: func() time.Time { return h.now }, Log: t.Logf})
	return h
}

func (h *watcherHarness) advance(d time.Duration) { h.now = h.now.Add(d) }

func (h *watcherHarness) pool(name string, selector map[string]string, maxUnavailable int, controlPlane bool) {
	h.t.Helper()
	p := &v1alpha1.UpdatePool{
		TypeMeta:   metav1.TypeMeta{APIVersion: v1alpha1.GroupName + "/" + v1alpha1.Version, Kind: "UpdatePool"},
		ObjectMeta: metav1.ObjectMeta{Name: name},
		Spec: v1alpha1.UpdatePoolSpec{NodeSelector: &metav1.LabelSelector{MatchLabels: selector}, OSImage: "os-2",
			ControlPlane: controlPlane, MaxUnavailable: ptr.To(intstr.FromInt(maxUnavailable))},
	}
	h.pools[name] = p
	h.deliverPool(name, watch.Modified)
}

// deliverPool delivers an event of the pool's current object at the next
// resourceVersion.
func (h *watcherHarness) deliverPool(name string, t watch.EventType) {
	h.t.Helper()
	h.rv++
	p := *h.pools[name] // UpdatePool has no DeepCopy: ObjectMeta's would be promoted
	p.Annotations = maps.Clone(p.Annotations)
	p.ResourceVersion = strconv.Itoa(h.rv)
	obj, err := runtime.DefaultUnstructuredConverter.ToUnstructured(&p)
	if err != nil {
		h.t.Fatal(err)
	}
	h.w.poolEvent(t, &unstructured.Unstructured{Object: obj})
}

// node creates a node with labels.
func (h *watcherHarness) node(name string, labels map[string]string) {
	h.nodes[name] = &corev1.Node{ObjectMeta: metav1.ObjectMeta{Name: name, Labels: labels, Annotations: map[string]string{}}}
	h.deliver(name)
}

// set changes a node's annotations (a nil value deletes) and delivers the
// event.
func (h *watcherHarness) set(name string, ann map[string]*string) {
	h.change(name, func(n *corev1.Node) {
		for k, v := range ann {
			if v == nil {
				delete(n.Annotations, k)
			} else {
				n.Annotations[k] = *v
			}
		}
	})
}

func (h *watcherHarness) change(name string, fn func(*corev1.Node)) {
	n := h.nodes[name].DeepCopy()
	fn(n)
	h.nodes[name] = n
	h.deliver(name)
}

func (h *watcherHarness) deliver(name string) {
	h.rv++
	n := h.nodes[name].DeepCopy()
	n.ResourceVersion = strconv.Itoa(h.rv)
	h.w.nodeEvent(watch.Modified, n)
}

// grant writes a grant from pool.
func (h *watcherHarness) grant(name, grant, pool string) {
	h.set(name, map[string]*string{keyGrant: &grant, keyGrantPool: &pool})
}

// step reports an agent step under grant.
func (h *watcherHarness) step(name, step, grant string) {
	h.set(name, map[string]*string{keyState: &step, keyStateGrant: &grant})
}

func (h *watcherHarness) cordon(name string, record bool, on bool) {
	h.change(name, func(n *corev1.Node) {
		n.Spec.Unschedulable = on
		if record && on {
			n.Annotations[keyCordonedBy] = "nodeward"
		} else {
			delete(n.Annotations, keyCordonedBy)
		}
	})
}

func (h *watcherHarness) expect(kinds ...string) {
	h.t.Helper()
	var got []string
	for _, v := range h.w.Violations() {
		got = append(got, v.Kind)
	}
	if !slices.Equal(got, kinds) {
		h.t.Fatalf("violations %v, want %v: %v", got, kinds, h.w.Violations())
	}
}

var inA = map[string]string{"pool": "a"}

func TestWatcherSecondGrantOverLimit(t *testing.T) {
	h := newWatcherHarness(t)
	h.pool("a", inA, 1, false)
	for _, n := range []string{"n1", "n2", "n3"} {
		h.node(n, maps.Clone(inA))
	}
	h.grant("n1", "g1", "a")
	h.step("n1", "Granted", "g1")
	h.step("n1", "Cordoning", "g1")
	h.expect()
	h.grant("n2", "g2", "a")
	h.expect(VMaxUnavailable)
	if v := h.w.Violations()[0]; !slices.Equal(v.Nodes, []string{"n2", "n1"}) || v.Pool != "a" {
		t.Fatalf("violation %v: want nodes n2 (the new grant), n1 in pool a", v)
	}
}

// A node Done for its grant is back in service: the coordinator writes the
// next grant before it removes the finished one (docs/protocol.md).
func TestWatcherFinishedGrantDoesNotCount(t *testing.T) {
	h := newWatcherHarness(t)
	h.pool("a", inA, 1, false)
	for _, n := range []string{"n1", "n2", "n3"} {
		h.node(n, maps.Clone(inA))
	}
	h.grant("n1", "g1", "a")
	h.step("n1", "Done", "g1")
	h.grant("n2", "g2", "a")
	h.expect()
	// Done for an older grant is not done with this one.
	h.grant("n1", "g3", "a")
	h.expect(VMaxUnavailable)
}

// Lowering maxUnavailable leaves nodes in flight legitimately over the new
// limit; a grant within the grace after the change is judged by the old
// limit, a later one by the new.
func TestWatcherLoweredLimit(t *testing.T) {
	h := newWatcherHarness(t)
	h.pool("a", inA, 2, false)
	for _, n := range []string{"n1", "n2", "n3", "n4"} {
		h.node(n, maps.Clone(inA))
	}
	h.grant("n1", "g1", "a")
	h.pool("a", inA, 1, false)
	h.advance(time.Second)
	h.grant("n2", "g2", "a")
	h.expect()
	h.advance(10 * time.Second)
	h.step("n2", "Done", "g2")
	h.set("n2", map[string]*string{keyGrant: nil})
	h.grant("n3", "g3", "a")
	h.expect(VMaxUnavailable)
}

func TestWatcherControlPlaneCap(t *testing.T) {
	h := newWatcherHarness(t)
	// Two pools each selecting one control-plane node: the cap is
	// cluster-wide.
	h.pool("cp1", map[string]string{"pool": "cp1"}, 1, true)
	h.pool("cp2", map[string]string{"pool": "cp2"}, 1, true)
	h.node("m1", map[string]string{"pool": "cp1", controlPlaneLabel: ""})
	h.node("m2", map[string]string{"pool": "cp2", masterLabel: ""})
	h.grant("m1", "g1", "cp1")
	h.expect()
	h.grant("m2", "g2", "cp2")
	h.expect(VControlPlane)
	// Recorded once per episode.
	h.step("m2", "Cordoning", "g2")
	h.expect(VControlPlane)
}

func TestWatcherRebootWithoutDrain(t *testing.T) {
	h := newWatcherHarness(t)
	h.pool("a", inA, 3, false)
	for _, n := range []string{"n1", "n2", "n3"} {
		h.node(n, maps.Clone(inA))
		h.grant(n, "g-"+n, "a")
		h.step(n, "Cordoning", "g-"+n)
		h.cordon(n, true, true)
	}
	// n1 drains, then finalizes and reboots: fine.
	for _, s := range []string{"Draining", "HooksPreReboot", "Finalizing", "Rebooting", "Verifying"} {
		h.step("n1", s, "g-n1")
	}
	// n2 finalizes straight after the cordon.
	h.step("n2", "Finalizing", "g-n2")
	h.step("n2", "Rebooting", "g-n2")
	h.expect(VRebootUndrained)
	// n3 drained, was uncordoned (pods may land again), then finalizes.
	h.step("n3", "Draining", "g-n3")
	h.cordon("n3", false, false)
	h.cordon("n3", true, true)
	h.step("n3", "Finalizing", "g-n3")
	h.expect(VRebootUndrained, VRebootUndrained)
}

func TestWatcherAdminCordon(t *testing.T) {
	h := newWatcherHarness(t)
	h.pool("a", inA, 1, false)
	h.node("n1", maps.Clone(inA))
	h.node("n2", maps.Clone(inA))
	// The admin cordons and uncordons n1: fine.
	h.w.AdminCordoned("n1")
	h.cordon("n1", false, true)
	h.w.AdminUncordoned("n1")
	h.cordon("n1", false, false)
	h.expect()
	// Someone else lifts the admin's cordon of n2.
	h.w.AdminCordoned("n2")
	h.cordon("n2", false, true)
	h.cordon("n2", false, false)
	h.expect(VAdminUncordon)
}

func TestWatcherPreDrainHook(t *testing.T) {
	h := newWatcherHarness(t)
	h.pool("a", inA, 2, false)
	h.node("n1", maps.Clone(inA))
	h.node("n2", maps.Clone(inA))
	hook := "chaos-injector"
	for _, n := range []string{"n1", "n2"} {
		h.set(n, map[string]*string{preDrainHookPrefix + "test": &hook})
		h.grant(n, "g-"+n, "a")
		h.step(n, "Granted", "g-"+n)
	}
	// n1 passes the gate 2 s after the hook appeared: it may have decided
	// on a copy from before.
	h.advance(2 * time.Second)
	h.step("n1", "Cordoning", "g-n1")
	h.expect()
	h.advance(20 * time.Second)
	h.step("n2", "HooksPreDrain", "g-n2")
	h.step("n2", "Cordoning", "g-n2")
	h.expect(VHookIgnored)
}

// A relabelled node holding a grant counts in the pool that issued it
// until the grant is released, and in its new pool once the grace passed.
func TestWatcherRelabelledGrant(t *testing.T) {
	h := newWatcherHarness(t)
	inB := map[string]string{"pool": "b"}
	h.pool("a", inA, 1, false)
	h.pool("b", inB, 1, false)
	h.node("n1", maps.Clone(inA))
	h.node("n2", maps.Clone(inA))
	h.node("n3", maps.Clone(inB))
	h.node("n4", maps.Clone(inB))
	h.grant("n1", "g1", "a")
	h.change("n1", func(n *corev1.Node) { n.Labels["pool"] = "b" })
	// Just relabelled: pool b's coordinator may not have seen it yet.
	h.grant("n3", "g3", "b")
	h.expect()
	h.set("n3", map[string]*string{keyGrant: nil, keyGrantPool: nil})
	h.advance(10 * time.Second)
	h.grant("n4", "g4", "b")
	h.expect(VMaxUnavailable)
	// Pool a still counts n1, whose grant it issued.
	h.grant("n2", "g2", "a")
	h.expect(VMaxUnavailable, VMaxUnavailable)
	if v := h.w.Violations()[1]; v.Pool != "a" || !slices.Equal(v.Nodes, []string{"n2", "n1"}) {
		t.Fatalf("violation %v: want pool a, nodes n2, n1", v)
	}
}

// A relist after a watch gap is judged as one consistent snapshot: two
// grants that appeared in the gap in a pool of one are caught, and the
// steps the gap hid are not held against the node.
func TestWatcherGap(t *testing.T) {
	h := newWatcherHarness(t)
	h.pool("a", inA, 1, false)
	h.node("n1", maps.Clone(inA))
	h.node("n2", maps.Clone(inA))
	var snapshot []runtime.Object
	for _, n := range []string{"n1", "n2"} {
		c := h.nodes[n].DeepCopy()
		c.Annotations[keyGrant], c.Annotations[keyGrantPool] = "g-"+n, "a"
		c.Annotations[keyState], c.Annotations[keyStateGrant] = "Finalizing", "g-"+n
		c.Annotations[keyCordonedBy] = "nodeward"
		c.Spec.Unschedulable = true
		h.rv++
		c.ResourceVersion = strconv.Itoa(h.rv)
		snapshot = append(snapshot, c)
	}
	h.w.replaceNodes(snapshot, true)
	h.expect(VMaxUnavailable, VMaxUnavailable)
	if !strings.Contains(h.w.Violations()[0].Detail, "watch gap") {
		t.Fatalf("violation %v does not say it was seen after a gap", h.w.Violations()[0])
	}
	if st := h.w.Stats(); st.StepsUnverified != 2 {
		t.Fatalf("steps unverified %d, want 2 (Finalizing seen only after the gap)", st.StepsUnverified)
	}
}

func TestPlan(t *testing.T) {
	a := Plan(42, 20, 2, time.Second, 3*time.Second)
	if b := Plan(42, 20, 2, time.Second, 3*time.Second); !reflect.DeepEqual(a, b) {
		t.Fatal("the same seed gave two plans")
	}
	if c := Plan(43, 20, 2, time.Second, 3*time.Second); reflect.DeepEqual(a, c) {
		t.Fatal("two seeds gave the same plan")
	}
	if len(a) != 20 {
		t.Fatalf("%d faults, want 20", len(a))
	}
	seen := map[Kind]int{}
	for i, f := range a {
		seen[f.Kind]++
		if f.Kind == ChangeTarget && i >= 12 {
			t.Errorf("target change at %d of 20: want it in the first 60%%", i)
		}
		if f.Gap < time.Second || f.Gap >= 3*time.Second {
			t.Errorf("gap %s out of bounds", f.Gap)
		}
	}
	for _, k := range Kinds() {
		if seen[k] == 0 {
			t.Errorf("no %s in %v", k, a)
		}
	}
	for _, k := range earlyKinds {
		if i := slices.IndexFunc(a, func(f Fault) bool { return f.Kind == k }); i >= 12 {
			t.Errorf("first %s at %d of 20: want it in the first 60%%", k, i)
		}
	}
	if seen[ChangeTarget] != 2 {
		t.Errorf("%d target changes, want 2", seen[ChangeTarget])
	}
}
