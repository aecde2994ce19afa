package main

import (
	"context"
	"fmt"
	"io"
	"sort"
	"strings"
	"sync"
	"text/tabwriter"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/informers"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/tools/cache"

	v1alpha1 "github.com/nodeward/nodeward/api/v1alpha1"
	"github.com/nodeward/nodeward/test/cluster"
	"github.com/nodeward/nodeward/test/oracle"
)

// tracker watches the group's nodes and records, at every event, what the
// summary needs: when each node was staged, granted, unavailable and done,
// and the most nodes unavailable at once.
type tracker struct {
	client kubernetes.Interface
	group  string

	mu      sync.Mutex
	nodes   map[string]*nodeTrack
	maxSeen int
}

type nodeTrack struct {
	zone                              string
	step                              v1alpha1.Step
	unschedulable                     bool
	reason                            string
	staged, granted, unavailable, end time.Time
	unavailableFor                    time.Duration
}

func newTracker(client kubernetes.Interface, group string) *tracker {
	return &tracker{client: client, group: group, nodes: map[string]*nodeTrack{}}
}

func (t *tracker) run(ctx context.Context) {
	factory := informers.NewSharedInformerFactoryWithOptions(t.client, 0,
		informers.WithTweakListOptions(func(o *metav1.ListOptions) { o.LabelSelector = cluster.GroupLabel + "=" + t.group }))
	inf := factory.Core().V1().Nodes().Informer()
	_, _ = inf.AddEventHandler(cache.ResourceEventHandlerFuncs{
		AddFunc:    func(obj any) { t.observe(obj.(*corev1.Node), inf.GetStore()) },
		UpdateFunc: func(_, obj any) { t.observe(obj.(*corev1.Node), inf.GetStore()) },
	})
	factory.Start(ctx.Done())
	<-ctx.Done()
	factory.Shutdown()
}

func (t *tracker) observe(n *corev1.Node, store cache.Store) {
	now := time.Now()
	t.mu.Lock()
	defer t.mu.Unlock()
	tr := t.nodes[n.Name]
	if tr == nil {
		tr = &nodeTrack{zone: n.Labels[cluster.ZoneLabel]}
		t.nodes[n.Name] = tr
	}
	tr.step, tr.unschedulable = v1alpha1.Step(n.Annotations[v1alpha1.AnnotationState]), n.Spec.Unschedulable
	tr.reason = n.Annotations[v1alpha1.AnnotationReason]
	if tr.reason == "" && tr.step == v1alpha1.StepDraining {
		tr.reason = v1alpha1.DrainBlockers(n)
	}
	_, granted := n.Annotations[v1alpha1.AnnotationGrant]
	switch {
	case tr.step == v1alpha1.StepStaged && tr.staged.IsZero():
		tr.staged = now
	case granted && tr.granted.IsZero():
		tr.granted = now
	}
	unavailable := oracle.CordonOrStep.Counts(n)
	if unavailable && tr.unavailable.IsZero() {
		tr.unavailable = now
	}
	if !unavailable && !tr.unavailable.IsZero() && tr.unavailableFor == 0 {
		tr.unavailableFor = now.Sub(tr.unavailable)
	}
	if tr.step == v1alpha1.StepDone && tr.end.IsZero() && !tr.granted.IsZero() {
		tr.end = now
	}
	count := 0
	for _, obj := range store.List() {
		if oracle.CordonOrStep.Counts(obj.(*corev1.Node)) {
			count++
		}
	}
	t.maxSeen = max(t.maxSeen, count)
}

func (t *tracker) maxUnavailable() int {
	t.mu.Lock()
	defer t.mu.Unlock()
	return t.maxSeen
}

func (t *tracker) sorted() []string {
	names := make([]string, 0, len(t.nodes))
	for n := range t.nodes {
		names = append(names, n)
	}
	sort.Strings(names)
	return names
}

// print writes one progress line per node and returns how many are done.
func (t *tracker) print(w io.Writer, elapsed time.Duration) int {
	t.mu.Lock()
	defer t.mu.Unlock()
	done := 0
	var cells []string
	for _, name := range t.sorted() {
		tr := t.nodes[name]
		mark := string(tr.step)
		if tr.unschedulable {
			mark += "*"
		}
		if tr.step == v1alpha1.StepDone && !tr.end.IsZero() {
			done++
		}
		cells = append(cells, fmt.Sprintf("%s:%s", strings.TrimPrefix(name, t.group+"-"), mark))
	}
	fmt.Fprintf(w, "[%5.1fs] done %d/%d  %s\n", elapsed.Seconds(), done, len(t.nodes), strings.Join(cells, "  "))
	return done
}

// progress returns how many nodes are done and a signature of every
// node's step and cordon, which changes when any node moves.
func (t *tracker) progress() (done int, steps string) {
	t.mu.Lock()
	defer t.mu.Unlock()
	var b strings.Builder
	for _, name := range t.sorted() {
		tr := t.nodes[name]
		if tr.step == v1alpha1.StepDone && !tr.end.IsZero() {
			done++
		}
		fmt.Fprintf(&b, "%s=%s/%v ", name, tr.step, tr.unschedulable)
	}
	return done, b.String()
}

// reasons prints why the nodes that are not done wait.
func (t *tracker) reasons(w io.Writer) {
	t.mu.Lock()
	defer t.mu.Unlock()
	for _, name := range t.sorted() {
		if tr := t.nodes[name]; tr.step != v1alpha1.StepDone && tr.reason != "" {
			fmt.Fprintf(w, "  %s waits in %s: %s\n", name, tr.step, tr.reason)
		}
	}
}

// summary prints the per-node table and the rollout's figures.
func (t *tracker) summary(w io.Writer, makespan time.Duration, maxUnavailable int) {
	t.mu.Lock()
	defer t.mu.Unlock()
	fmt.Fprintln(w, "\n(* = cordoned)")
	tw := tabwriter.NewWriter(w, 0, 0, 2, ' ', 0)
	fmt.Fprintln(tw, "NODE\tZONE\tSTEP\tSTAGED BEFORE SLOT\tUNAVAILABLE")
	staged, total := 0, 0
	var sum time.Duration
	for _, name := range t.sorted() {
		tr := t.nodes[name]
		before := !tr.staged.IsZero() && !tr.granted.IsZero() && tr.staged.Before(tr.granted)
		if before {
			staged++
		}
		total++
		sum += tr.unavailableFor
		fmt.Fprintf(tw, "%s\t%s\t%s\t%v\t%s\n", name, tr.zone, tr.step, before, tr.unavailableFor.Round(10*time.Millisecond))
	}
	tw.Flush()
	fmt.Fprintf(w, "\nmakespan %s; maximum unavailable at once %d (maxUnavailable %d); mean unavailable per node %s; staged before slot %d/%d\n",
		makespan.Round(10*time.Millisecond), t.maxSeen, maxUnavailable, (sum / time.Duration(max(total, 1))).Round(10*time.Millisecond),
		staged, total)
}
