package drain

import (
	"context"
	"math"
	"sync"
	"time"

	policyv1 "k8s.io/api/policy/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/watch"

	"github.com/nodeward/nodeward/api/kube"
)

// pdbWaker wakes the evictions a PodDisruptionBudget refused as soon as the
// budget allows a disruption again, rather than at the end of their
// backoff: a budget frees when the pods evicted before become ready
// elsewhere, and a drain that then waits out a backoff of up to
// MaxRetryBackoff holds the node (and its slot) for nothing. One watch per
// budget, shared by the pods it blocks, ended with the drain; the backoff
// timer stays as the fallback (a watch that cannot start, an event lost).
// A refusal names one budget (wake).
type pdbWaker struct {
	ctx    context.Context
	client *kube.Client

	mu      sync.Mutex
	budgets map[string]chan struct{} // namespace/name → closed at the next "allowed" event
	// allowed is each watched budget's disruptionsAllowed in its latest
	// event, -1 while the disruption controller has not caught up with
	// its spec. The Eviction API lowers it as it admits an eviction, so
	// the watch shows a disruption taken as soon as it shows it freed.
	allowed map[string]int32
}

func newPDBWaker(ctx context.Context, client *kube.Client) *pdbWaker {
	return &pdbWaker{ctx: ctx, client: client, budgets: map[string]chan struct{}{}, allowed: map[string]int32{}}
}

// wake returns a channel closed when the budget that refused an eviction
// is seen allowing a disruption after this call. The Eviction API refuses
// a pod under several budgets with a 500, never a 429, so a refusal names
// one budget; for any other count wake returns nil and the backoff alone
// retries.
func (w *pdbWaker) wake(pdbs []PDBStatus) <-chan struct{} {
	if len(pdbs) != 1 {
		return nil
	}
	return w.next(pdbs[0].Namespace, pdbs[0].Name)
}

// next is the channel of budget namespace/name's next "allowed" event,
// starting its watch the first time.
func (w *pdbWaker) next(namespace, name string) <-chan struct{} {
	key := namespace + "/" + name
	w.mu.Lock()
	defer w.mu.Unlock()
	if ch, ok := w.budgets[key]; ok {
		return ch
	}
	ch := make(chan struct{})
	w.budgets[key] = ch
	go w.watch(namespace, name, key)
	return ch
}

// watch follows one budget until the drain ends, re-opening the watch when
// the server closes it, and signals every event that allows a disruption.
func (w *pdbWaker) watch(namespace, name, key string) {
	for w.ctx.Err() == nil {
		wi, err := w.client.PodDisruptionBudgets(namespace).Watch(w.ctx, metav1.ListOptions{FieldSelector: "metadata.name=" + name})
		if err != nil {
			select {
			case <-w.ctx.Done():
			case <-time.After(time.Second):
			}
			continue
		}
		for ev := range wi.ResultChan() {
			pdb, ok := ev.Object.(*policyv1.PodDisruptionBudget)
			if !ok || ev.Type == watch.Deleted || ev.Type == watch.Error {
				continue
			}
			w.observe(key, pdb)
		}
		wi.Stop()
	}
}

// observe records a budget's event and wakes its waiters when it allows a
// disruption.
func (w *pdbWaker) observe(key string, pdb *policyv1.PodDisruptionBudget) {
	w.mu.Lock()
	defer w.mu.Unlock()
	allowed := pdb.Status.DisruptionsAllowed
	if pdb.Status.ObservedGeneration < pdb.Generation {
		allowed = -1
	}
	w.allowed[key] = allowed
	if allowed > 0 {
		close(w.budgets[key])
		w.budgets[key] = make(chan struct{})
	}
}

// exhausted reports whether the one budget that refused an eviction was
// last seen allowing no disruption. Only a caller the watch just woke may
// trust it (a watch that stalls keeps its last event); unknown is false.
func (w *pdbWaker) exhausted(pdbs []PDBStatus) bool {
	if len(pdbs) != 1 {
		return false
	}
	w.mu.Lock()
	defer w.mu.Unlock()
	allowed, seen := w.allowed[pdbs[0].Namespace+"/"+pdbs[0].Name]
	return seen && allowed == 0
}

// budgetQueue orders the drains that wait on the same budgets, oldest
// first, without their talking to each other. Every drain a budget refused
// wakes on the same watch event when it allows a disruption again, and the
// first eviction to reach the API server takes the unit: with several
// nodes draining under one budget, which node gets it was a draw, and in
// the 100-node rollout a node with two pods took 6 s at the median and
// 14 s at the worst (docs/benchmarks.md). So a woken drain lets the others
// go first for its turn, a delay that shrinks with how long it has waited
// on budgets: a drain that has waited longer reaches the server first.
// Its cost is the turn of the oldest waiter, tens of milliseconds after a
// wait of seconds. The place is the drainer's, kept across attempts (the
// agent's drain is a series of attempts) until a drain finishes; an agent
// restart forgets it. It orders, and never holds back, an eviction the
// budget allows: the worst case is the eviction a refusal would have made
// anyway, one turn later.
type budgetQueue struct {
	first, decay time.Duration // the turn of a drain that has not waited; its 1/e time

	mu    sync.Mutex
	since time.Time // the drain's first refusal by a budget; zero when none
}

// Defaults of budgetQueue: a turn starts at 400 ms and falls by a factor
// e for every 3 s waited (76 ms after 5 s, 14 ms after 10 s). Drains that
// started waiting a second apart reach the server 25–130 ms apart in their
// first five seconds of waiting, above most of the jitter of the API
// server's answers to 100 agents on 2 vCPU. In the 100-node rollout the
// slowest node took 17–19 s without a turn (three runs), 14 s with a first
// turn of 150 ms (one run) and 11–13 s with 400 ms (three runs), and the
// makespan did not grow (docs/benchmarks.md).
const (
	budgetTurnFirst = 400 * time.Millisecond
	budgetTurnDecay = 3 * time.Second
)

// refused records a refusal by a budget at now: the drain's wait starts at
// its first.
func (q *budgetQueue) refused(now time.Time) {
	q.mu.Lock()
	defer q.mu.Unlock()
	if q.since.IsZero() {
		q.since = now
	}
}

// turn is how long a drain woken at now lets others go first.
func (q *budgetQueue) turn(now time.Time) time.Duration {
	q.mu.Lock()
	defer q.mu.Unlock()
	if q.since.IsZero() || q.decay <= 0 {
		return q.first
	}
	waited := max(now.Sub(q.since), 0)
	return time.Duration(float64(q.first) * math.Exp(-float64(waited)/float64(q.decay)))
}

// finished forgets the wait: the drain is over.
func (q *budgetQueue) finished() {
	q.mu.Lock()
	defer q.mu.Unlock()
	q.since = time.Time{}
}
