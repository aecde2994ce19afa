package drain

import (
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/utils/ptr"

	"github.com/nodeward/nodeward/api/v1alpha1"
)

func TestParseRulesRejectsBadInputNamingTheField(t *testing.T) {
	cases := map[string]struct{ in, want string }{
		"wrong kind":       {`{"kind":"Rules","rules":[]}`, `kind "Rules": must be DrainRules`},
		"unknown field":    {"kind: DrainRules\nrulez: []", `unknown field "rulez"`},
		"bad name":         {"kind: DrainRules\nrules: [{name: Bad_Name, podSelector: {}}]", `rules[0].name "Bad_Name"`},
		"duplicate name":   {"kind: DrainRules\nrules: [{name: a, podSelector: {}}, {name: a, podSelector: {}}]", `rules[1].name "a": duplicate`},
		"no match clause":  {"kind: DrainRules\nrules: [{name: a, order: 3}]", "rules[0]: needs namespaces or podSelector"},
		"bad namespace":    {"kind: DrainRules\nrules: [{name: a, namespaces: [\"NS!\"]}]", `rules[0].namespaces[0] "NS!"`},
		"bad selector":     {"kind: DrainRules\nrules: [{name: a, podSelector: {matchExpressions: [{key: app, operator: Near}]}}]", "rules[0].podSelector"},
		"bad behavior":     {"kind: DrainRules\nrules: [{name: a, podSelector: {}, behavior: Delete}]", `rules[0].behavior "Delete"`},
		"order not an int": {"kind: DrainRules\nrules: [{name: a, podSelector: {}, order: first}]", "decode"},
		"order overflow":   {"kind: DrainRules\nrules: [{name: a, podSelector: {}, order: 99999999999}]", "decode"},
	}
	for name, c := range cases {
		t.Run(name, func(t *testing.T) {
			r, err := ParseRules([]byte(c.in))
			if err == nil || !strings.Contains(err.Error(), c.want) {
				t.Fatalf("ParseRules = %v, %v; want an error containing %q", r, err, c.want)
			}
		})
	}
}

func pod(ns, name string, labels map[string]string, mod func(*corev1.Pod)) *corev1.Pod {
	p := &corev1.Pod{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: name, UID: types.UID("uid-" + name), Labels: labels,
		OwnerReferences: []metav1.OwnerReference{{Kind: "ReplicaSet", Name: "rs", Controller: ptr.To(true)}}},
		Status: corev1.PodStatus{Phase: corev1.PodRunning}}
	if mod != nil {
		mod(p)
	}
	return p
}

func TestPlanSortsPodsIntoBatches(t *testing.T) {
	rules, err := ParseRules([]byte(`
kind: DrainRules
defaultOrder: 5
rules:
- {name: monitoring, namespaces: [monitoring], order: 100}
- {name: keep, podSelector: {matchLabels: {keep: "yes"}}, behavior: Skip}
- {name: jobs, podSelector: {matchExpressions: [{key: job, operator: Exists}]}, order: -1, behavior: WaitCompleted}
`))
	if err != nil {
		t.Fatal(err)
	}
	now := time.Now()
	pods := []*corev1.Pod{
		pod("monitoring", "prom", nil, nil),
		pod("app", "web", nil, nil),
		pod("app", "pinned", map[string]string{"keep": "yes"}, nil),
		pod("app", "etl", map[string]string{"job": "x"}, nil),
		pod("app", "early", nil, func(p *corev1.Pod) { p.Annotations = map[string]string{v1alpha1.AnnotationDrainOrder: "-7"} }),
		pod("app", "ds", nil, func(p *corev1.Pod) { p.OwnerReferences[0].Kind = "DaemonSet" }),
		pod("app", "done", nil, func(p *corev1.Pod) { p.Status.Phase = corev1.PodSucceeded }),
		pod("app", "stuck", nil, func(p *corev1.Pod) { p.DeletionTimestamp = &metav1.Time{Time: now.Add(-time.Hour)} }),
		pod("app", "leaving", nil, func(p *corev1.Pod) { p.DeletionTimestamp = &metav1.Time{Time: now} }),
		pod("app", "bare", nil, func(p *corev1.Pod) { p.OwnerReferences = nil }),
	}
	p, err := plan("n1", pods, Options{Rules: rules}.withDefaults(), now)
	if err != nil {
		t.Fatal(err)
	}
	var got []string
	for _, b := range p.Batches {
		var names []string
		for _, pp := range b.Pods {
			names = append(names, pp.Pod.Name)
		}
		got = append(got, b.Label()+":"+strings.Join(names, ","))
	}
	want := "order -7:early|order -1:etl|order 5:leaving,web|order 100:prom"
	if strings.Join(got, "|") != want {
		t.Errorf("batches = %s\nwant      %s", strings.Join(got, "|"), want)
	}
	if len(p.Skipped) != 3 || len(p.Finished) != 1 || p.Finished[0].Name != "done" {
		t.Errorf("skipped %v, finished %v; want ds, pinned, stuck skipped and done finished", p.Skipped, p.Finished)
	}
	if err := p.Err(); err == nil || !strings.Contains(err.Error(), "app/bare (no controller") {
		t.Errorf("plan error = %v, want the bare pod refused", err)
	}
}

func TestPlanByPriorityMovesCriticalFirst(t *testing.T) {
	prio := func(v int32) func(*corev1.Pod) { return func(p *corev1.Pod) { p.Spec.Priority = &v } }
	pods := []*corev1.Pod{pod("a", "low", nil, prio(0)), pod("a", "high", nil, prio(1000)), pod("a", "mid", nil, prio(10))}
	p, err := plan("n1", pods, Options{ByPriority: true}.withDefaults(), time.Now())
	if err != nil {
		t.Fatal(err)
	}
	var got []string
	for _, b := range p.Batches {
		got = append(got, b.Pods[0].Pod.Name)
	}
	if strings.Join(got, ",") != "high,mid,low" {
		t.Errorf("batches by priority = %v, want high,mid,low", got)
	}
}

func TestMalformedOrderAnnotationIsAnErrorNamingThePod(t *testing.T) {
	bad := pod("app", "web", nil, func(p *corev1.Pod) { p.Annotations = map[string]string{v1alpha1.AnnotationDrainOrder: "soon"} })
	_, err := plan("n1", []*corev1.Pod{bad}, Options{}.withDefaults(), time.Now())
	if err == nil || !strings.Contains(err.Error(), `pod app/web: annotation drain.nodeward.io/order="soon"`) {
		t.Fatalf("plan error = %v", err)
	}
}

func TestOptionsValidateNamesTheField(t *testing.T) {
	err := Options{OnTimeout: "later", EmptyDir: "keep", Concurrency: -1, GracePeriod: ptr.To[int64](-2)}.Validate()
	for _, want := range []string{`on-timeout "later"`, `emptyDir: pod policy "keep"`, "concurrency -1", "grace period -2"} {
		if err == nil || !strings.Contains(err.Error(), want) {
			t.Errorf("Validate = %v, want it to contain %q", err, want)
		}
	}
}

// FuzzParseRules: any input either fails with an error or yields rules
// that validate and match without panicking.
func FuzzParseRules(f *testing.F) {
	f.Add([]byte("kind: DrainRules\nrules: [{name: a, podSelector: {matchLabels: {x: y}}, order: 3}]"))
	f.Add([]byte(`{"kind":"DrainRules","defaultOrder":-2,"rules":[{"name":"b","namespaces":["ns"],"behavior":"WaitCompleted"}]}`))
	f.Add([]byte("kind: DrainRules\nrules: [{name: c, podSelector: {matchExpressions: [{key: k, operator: NotIn, values: [v]}]}, behavior: Skip}]"))
	f.Add([]byte("kind: DrainRules\nrules: [{name: a}]"))
	f.Fuzz(func(t *testing.T, data []byte) {
		r, err := ParseRules(data)
		if err != nil {
			if r != nil {
				t.Fatal("rules returned with an error")
			}
			return
		}
		p := pod("ns", "p", map[string]string{"x": "y", "k": "w"}, nil)
		if _, behavior, _, err := r.orderOf(p); err != nil || behavior == "" {
			t.Fatalf("valid rules gave behavior %q, error %v", behavior, err)
		}
	})
}
