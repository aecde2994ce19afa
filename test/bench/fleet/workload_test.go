package fleet

import (
	"context"
	"fmt"
	"slices"
	"sync"
	"testing"
	"time"

	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	policyv1 "k8s.io/api/policy/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/intstr"
	"k8s.io/client-go/informers"
	"k8s.io/client-go/tools/cache"
	"k8s.io/utils/ptr"

	"github.com/nodeward/nodeward/test/cluster"
)

// workload runs two pods per node under a PDB that lets one pod in ten go,
// in a namespace of its own, which it returns. Its pods start as kwok's
// stock stages have them: created 1–5 s after being bound, Ready 1–5 s
// after that.
func workload(b *testing.B, cp *cluster.ControlPlane, names []string) string {
	b.Helper()
	ns := cp.Namespace(b)
	labels := map[string]string{"app": "fleet"}
	dep := &appsv1.Deployment{ObjectMeta: metav1.ObjectMeta{Name: "fleet", Namespace: ns}, Spec: appsv1.DeploymentSpec{
		Replicas: ptr.To(int32(2 * len(names))), Selector: &metav1.LabelSelector{MatchLabels: labels},
		Template: corev1.PodTemplateSpec{ObjectMeta: metav1.ObjectMeta{Labels: labels}, Spec: corev1.PodSpec{
			NodeSelector:                  map[string]string{cluster.GroupLabel: "fleet"},
			TerminationGracePeriodSeconds: ptr.To[int64](1),
			Containers:                    []corev1.Container{{Name: "app", Image: "registry.invalid/app:1"}}}},
	}}
	ctx := context.Background()
	if _, err := cp.Client().AppsV1().Deployments(ns).Create(ctx, dep, metav1.CreateOptions{}); err != nil {
		b.Fatal(err)
	}
	pdb := &policyv1.PodDisruptionBudget{ObjectMeta: metav1.ObjectMeta{Name: "fleet", Namespace: ns},
		Spec: policyv1.PodDisruptionBudgetSpec{MaxUnavailable: ptr.To(intstr.FromString("10%")), Selector: &metav1.LabelSelector{MatchLabels: labels}}}
	if _, err := cp.Client().PolicyV1().PodDisruptionBudgets(ns).Create(ctx, pdb, metav1.CreateOptions{}); err != nil {
		b.Fatal(err)
	}
	cluster.WaitFor(b, 3*time.Minute, "the fleet's pods running", func(ctx context.Context) (bool, error) {
		d, err := cp.Client().AppsV1().Deployments(ns).Get(ctx, "fleet", metav1.GetOptions{})
		return err == nil && d.Status.AvailableReplicas == *dep.Spec.Replicas, err
	})
	return ns
}

// workloadWatch follows the workload through the rollout: when each pod
// was first seen, first seen Ready and first seen terminating, and when
// the PDB allowed no disruption. Every eviction makes the ReplicaSet
// create a replacement at once, and the evicted pod holds one unit of the
// budget until a replacement is Ready; a replacement evicted before it is
// Ready (the Eviction API lets an unready pod go without the budget) hands
// the unit on to its own replacement. At most budget units are held at any
// time. So each replacement's time from its creation until it is Ready or
// terminating, within the rollout, summed and divided by the budget, is a
// lower bound on the rollout's length that no node agent can beat: the
// workload's own.
type workloadWatch struct {
	mu      sync.Mutex
	seen    map[string]time.Time // pod UID → first seen
	ready   map[string]time.Time // pod UID → first seen Ready
	gone    map[string]time.Time // pod UID → first seen terminating, or deleted
	host    map[string]string    // pod UID → its node
	budget  int32                // pods the PDB lets be unavailable
	zeroAt  time.Time            // when the PDB last went to 0 allowed; zero while it allows some
	zeroFor []span               // the closed spans of 0 allowed
}

type span struct{ from, to time.Time }

func watchWorkload(b *testing.B, cp *cluster.ControlPlane, ns string) *workloadWatch {
	w := &workloadWatch{seen: map[string]time.Time{}, ready: map[string]time.Time{}, gone: map[string]time.Time{}, host: map[string]string{}}
	factory := informers.NewSharedInformerFactoryWithOptions(cp.Client(), 0, informers.WithNamespace(ns))
	onPod := func(obj any) {
		p, ok := obj.(*corev1.Pod)
		if !ok {
			return
		}
		now := time.Now()
		w.mu.Lock()
		defer w.mu.Unlock()
		uid := string(p.UID)
		if _, ok := w.seen[uid]; !ok {
			w.seen[uid] = now
		}
		if p.Spec.NodeName != "" {
			w.host[uid] = p.Spec.NodeName
		}
		if _, ok := w.ready[uid]; !ok && podReady(p) {
			w.ready[uid] = now
		}
		if _, ok := w.gone[uid]; !ok && p.DeletionTimestamp != nil {
			w.gone[uid] = now
		}
	}
	onPodDeleted := func(obj any) {
		if tomb, ok := obj.(cache.DeletedFinalStateUnknown); ok {
			obj = tomb.Obj
		}
		if p, ok := obj.(*corev1.Pod); ok {
			now := time.Now()
			w.mu.Lock()
			defer w.mu.Unlock()
			if _, ok := w.gone[string(p.UID)]; !ok {
				w.gone[string(p.UID)] = now
			}
		}
	}
	onPDB := func(obj any) {
		pdb, ok := obj.(*policyv1.PodDisruptionBudget)
		if !ok {
			return
		}
		now := time.Now()
		w.mu.Lock()
		defer w.mu.Unlock()
		w.budget = pdb.Status.ExpectedPods - pdb.Status.DesiredHealthy
		switch exhausted := pdb.Status.DisruptionsAllowed == 0; {
		case exhausted && w.zeroAt.IsZero():
			w.zeroAt = now
		case !exhausted && !w.zeroAt.IsZero():
			w.zeroFor = append(w.zeroFor, span{w.zeroAt, now})
			w.zeroAt = time.Time{}
		}
	}
	_, _ = factory.Core().V1().Pods().Informer().AddEventHandler(cache.ResourceEventHandlerFuncs{
		AddFunc: onPod, UpdateFunc: func(_, o any) { onPod(o) }, DeleteFunc: onPodDeleted})
	_, _ = factory.Policy().V1().PodDisruptionBudgets().Informer().AddEventHandler(cache.ResourceEventHandlerFuncs{
		AddFunc: onPDB, UpdateFunc: func(_, o any) { onPDB(o) }})
	stop := make(chan struct{})
	factory.Start(stop)
	factory.WaitForCacheSync(stop)
	b.Cleanup(func() { close(stop); factory.Shutdown() })
	return w
}

// evictedFrom counts, for each node, the workload's pods that went from it
// between start and end.
func (w *workloadWatch) evictedFrom(start, end time.Time) map[string]int {
	w.mu.Lock()
	defer w.mu.Unlock()
	out := map[string]int{}
	for uid, gone := range w.gone {
		if !gone.Before(start) && !gone.After(end) && w.host[uid] != "" {
			out[w.host[uid]]++
		}
	}
	return out
}

func podReady(p *corev1.Pod) bool {
	for _, c := range p.Status.Conditions {
		if c.Type == corev1.PodReady {
			return c.Status == corev1.ConditionTrue
		}
	}
	return false
}

// budgetUse is what the workload's budget allowed a rollout.
type budgetUse struct {
	evictions int           // replacements created during the rollout
	readyP50  time.Duration // a replacement's first sight → Ready, median
	bound     time.Duration // the budget's units held within the rollout, summed, / the budget
	exhausted time.Duration // how long within the rollout the PDB allowed no disruption
}

func (u budgetUse) String() string {
	return fmt.Sprintf("%d evictions, replacement Ready after %s (median); lower bound %s; no disruption allowed for %s",
		u.evictions, u.readyP50.Round(time.Millisecond), u.bound.Round(10*time.Millisecond), u.exhausted.Round(10*time.Millisecond))
}

// result is the budget's use by the rollout from start to end.
func (w *workloadWatch) result(start, end time.Time) budgetUse {
	w.mu.Lock()
	defer w.mu.Unlock()
	var u budgetUse
	var toReady []time.Duration
	var held time.Duration
	for uid, seen := range w.seen {
		if seen.Before(start) || seen.After(end) {
			continue
		}
		u.evictions++
		ready, ok := w.ready[uid]
		if ok {
			toReady = append(toReady, ready.Sub(seen))
		} else {
			ready = end
		}
		if gone, ok := w.gone[uid]; ok && gone.Before(ready) {
			ready = gone // evicted unready: its replacement holds the unit on
		}
		held += minTime(ready, end).Sub(seen)
	}
	if len(toReady) > 0 {
		slices.Sort(toReady)
		u.readyP50 = toReady[len(toReady)/2]
	}
	if w.budget > 0 {
		u.bound = held / time.Duration(w.budget)
	}
	spans := w.zeroFor
	if !w.zeroAt.IsZero() {
		spans = append(slices.Clone(spans), span{w.zeroAt, end})
	}
	for _, s := range spans {
		from, to := maxTime(s.from, start), minTime(s.to, end)
		if to.After(from) {
			u.exhausted += to.Sub(from)
		}
	}
	return u
}

func maxTime(a, b time.Time) time.Time {
	if a.After(b) {
		return a
	}
	return b
}

func minTime(a, b time.Time) time.Time {
	if a.Before(b) {
		return a
	}
	return b
}
