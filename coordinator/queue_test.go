package coordinator

import (
	"fmt"
	"slices"
	"strings"
	"testing"
	"time"

	"k8s.io/apimachinery/pkg/util/intstr"

	"github.com/nodeward/nodeward/api/v1alpha1"
)

// TestQueueOrder: spec.order flips the age order alone: nodes that never
// yielded (or yielded longest ago) still go first, and names still break
// ties, whichever the order.
func TestQueueOrder(t *testing.T) {
	base := time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)
	at := func(min int) time.Time { return base.Add(time.Duration(min) * time.Minute) }
	nodes := []nodeView{
		{name: "old", created: at(0)},
		{name: "mid-b", created: at(1)},
		{name: "mid-a", created: at(1)}, // same age as mid-b: the name decides
		{name: "new", created: at(2)},
		{name: "yielded-new", created: at(3), yieldedAt: at(10)},
		{name: "yielded-old", created: at(-1), yieldedAt: at(5)}, // yielded earlier than yielded-new
	}
	for _, tc := range []struct {
		order v1alpha1.UpdateOrder
		want  string
	}{
		{"", "[old mid-a mid-b new yielded-old yielded-new]"},
		{v1alpha1.OldestFirst, "[old mid-a mid-b new yielded-old yielded-new]"},
		{v1alpha1.NewestFirst, "[new mid-a mid-b old yielded-old yielded-new]"},
	} {
		before, err := queueOf(tc.order)
		if err != nil {
			t.Fatalf("order %q: %v", tc.order, err)
		}
		queue := make([]*nodeView, len(nodes))
		for i := range nodes {
			queue[i] = &nodes[i]
		}
		slices.SortFunc(queue, func(a, b *nodeView) int {
			switch {
			case before(a, b):
				return -1
			case before(b, a):
				return 1
			}
			return 0
		})
		got := make([]string, len(queue))
		for i, n := range queue {
			got[i] = n.name
		}
		if fmt.Sprint(got) != tc.want {
			t.Errorf("order %q: queue %v, want %s", tc.order, got, tc.want)
		}
	}
}

// TestOrderDecidesTargetsGrantsAndCanaries: with NewestFirst the newest
// nodes are handed the target first (maxStaging), granted first, and are
// the canaries of canary.nodes; unset, the oldest.
func TestOrderDecidesTargetsGrantsAndCanaries(t *testing.T) {
	newest := func(s *v1alpha1.UpdatePoolSpec) { s.Order = v1alpha1.NewestFirst }
	for _, tc := range []struct {
		name                 string
		order                func(*v1alpha1.UpdatePoolSpec)
		grants, canary, tgts string
	}{
		{"unset", func(*v1alpha1.UpdatePoolSpec) {}, "[n00 n01]", "[n00]", "[n00 n01]"},
		{"NewestFirst", newest, "[n03 n02]", "[n03]", "[n03 n02]"},
	} {
		p, err := plan(pool(intstr.FromInt32(2), tc.order), healthy(4).views(), nil, now)
		if err != nil || fmt.Sprint(p.grant) != tc.grants {
			t.Errorf("%s: granted %v (%v), want %s", tc.name, p.grant, err, tc.grants)
		}
		canary := func(s *v1alpha1.UpdatePoolSpec) { s.Canary = &v1alpha1.Canary{Bake: "1m"} }
		p, err = plan(pool(intstr.FromInt32(2), tc.order, canary), healthy(4).views(), nil, now)
		if err != nil || fmt.Sprint(p.grant) != tc.canary {
			t.Errorf("%s, canary of 1: granted %v (%v), want %s", tc.name, p.grant, err, tc.canary)
		}
		unstaged := healthy(4)
		for i := range unstaged {
			unstaged.annotate(i, v1alpha1.AnnotationTarget, "", v1alpha1.AnnotationStaged, "")
		}
		staging := func(s *v1alpha1.UpdatePoolSpec) { s.MaxStaging = new(int32(2)) }
		p, err = plan(pool(intstr.FromInt32(2), tc.order, staging), unstaged.views(), nil, now)
		if err != nil || fmt.Sprint(p.setTarget) != tc.tgts {
			t.Errorf("%s, maxStaging 2: target handed to %v (%v), want %s", tc.name, p.setTarget, err, tc.tgts)
		}
	}
}

// TestUnknownOrderIsAnError: an order the CRD would have refused (its
// validation bypassed) plans nothing, and the error names the field and
// the value.
func TestUnknownOrderIsAnError(t *testing.T) {
	p, err := plan(pool(intstr.FromInt32(2), func(s *v1alpha1.UpdatePoolSpec) { s.Order = "Sideways" }), healthy(3).views(), nil, now)
	if err == nil || p != nil {
		t.Fatalf("order Sideways: planned %+v, error %v; want no plan and an error", p, err)
	}
	for _, want := range []string{"spec.order", `"Sideways"`, "OldestFirst", "NewestFirst"} {
		if !strings.Contains(err.Error(), want) {
			t.Errorf("error %q does not say %s", err, want)
		}
	}
}
