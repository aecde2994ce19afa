package drain

import (
	"context"
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
}

func newPDBWaker(ctx context.Context, client *kube.Client) *pdbWaker {
	return &pdbWaker{ctx: ctx, client: client, budgets: map[string]chan struct{}{}}
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
			if pdb.Status.DisruptionsAllowed > 0 && pdb.Status.ObservedGeneration >= pdb.Generation {
				w.signal(key)
			}
		}
		wi.Stop()
	}
}

func (w *pdbWaker) signal(key string) {
	w.mu.Lock()
	defer w.mu.Unlock()
	close(w.budgets[key])
	w.budgets[key] = make(chan struct{})
}
