package coordinator

import (
	"context"
	"errors"
	"log/slog"
	"net/http"
	"sync"
	"time"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/nodeward/nodeward/api/kube"
	"github.com/nodeward/nodeward/api/v1alpha1"
)

// expectation is a grant the coordinator wrote (or is writing) that its
// node cache has not shown yet; the node counts as unavailable meanwhile.
// The grant write is conditional on rv, the node's resourceVersion the
// plan saw, so once the node is at any other version without the grant,
// the write can no longer land.
//
// departs is the departure the node counts as should its Node be deleted
// while the expectation is pending (the grant landed, or its write's
// outcome is unknown): the grant, the pool that issued it, whether the
// node is a control-plane node and its zone, as DepartureOf would read
// them off the deleted object had it shown the grant (Since unset).
type expectation struct {
	grant   string
	rv      string
	departs Departure
	sent    time.Time // when the write was sent (Config.Now)
	checked time.Time // when the API was last asked about it
}

// expectations owns the grants written but not yet observed, by node. A
// pass copies them BEFORE it reads the node index (planPass), so that a
// node event in between leaves a new grant in the copy or in the index,
// never in neither; an expectation is dropped only for what the index
// shows (observe) or what the API answers (settle, expire).
//
// A Node deleted while its expectation is pending departs (departed) BEFORE
// the expectation is dropped: the Node's delete event records the
// departure before the index drops the Node (Controller.nodeDeleted), and
// observe and check record it again, if need be, before they drop the
// expectation as "node deleted". A pass that finds the expectation in
// neither its copy nor the index then finds the departure, which it reads
// after the index (departures: ordering).
type expectations struct {
	client *kube.Client
	log    *slog.Logger
	// indexed reads a node as the index holds it (nil: not held).
	indexed func(name string) *corev1.Node
	// departed records the departure of a node whose Node was deleted
	// while exp was pending (departures.expected).
	departed func(node string, exp expectation)
	// timeout bounds how long an expectation counts without asking the
	// API again.
	timeout time.Duration

	mu      sync.Mutex
	pending map[string]expectation
}

func newExpectations(client *kube.Client, log *slog.Logger, indexed func(string) *corev1.Node,
	departed func(string, expectation), timeout time.Duration) *expectations {
	return &expectations{client: client, log: log, indexed: indexed, departed: departed, timeout: timeout,
		pending: map[string]expectation{}}
}

// expect records the expectation before the grant is written: exp's
// grant, rv and departs; its times are now.
func (e *expectations) expect(node string, exp expectation, now time.Time) {
	exp.sent, exp.checked = now, now
	e.mu.Lock()
	defer e.mu.Unlock()
	e.pending[node] = exp
}

// nodes copies the expectations' nodes.
func (e *expectations) nodes() map[string]bool {
	e.mu.Lock()
	defer e.mu.Unlock()
	out := make(map[string]bool, len(e.pending))
	for n := range e.pending {
		out[n] = true
	}
	return out
}

// grants copies the expected grant of each node.
func (e *expectations) grants() map[string]string {
	e.mu.Lock()
	defer e.mu.Unlock()
	out := make(map[string]string, len(e.pending))
	for n, exp := range e.pending {
		out[n] = exp.grant
	}
	return out
}

func (e *expectations) get(node string) (expectation, bool) {
	e.mu.Lock()
	defer e.mu.Unlock()
	exp, ok := e.pending[node]
	return exp, ok
}

// gone drops node's expectation exp, its Node deleted, once its departure
// is recorded: the grant may have landed and the machine acted on it.
func (e *expectations) gone(node string, exp expectation) {
	e.mu.Lock()
	cur, ok := e.pending[node]
	if ok && cur == exp {
		e.departed(node, exp) // before the drop (expectations: ordering)
		delete(e.pending, node)
	}
	e.mu.Unlock()
	if ok && cur == exp {
		e.log.Info("grant expectation dropped", "node", node, "grant", exp.grant,
			"why", "node deleted; counted as departed under the grant")
	}
}

// drop removes node's expectation if it is still exp.
func (e *expectations) drop(node string, exp expectation, why string) {
	e.mu.Lock()
	cur, ok := e.pending[node]
	if ok && cur == exp {
		delete(e.pending, node)
	}
	e.mu.Unlock()
	if ok && cur == exp && why != "" {
		e.log.Info("grant expectation dropped", "node", node, "grant", exp.grant, "why", why)
	}
}

// observe drops node's expectation once the index shows the grant, or
// shows the node at another version without it (the conditional write can
// no longer land), or no longer holds the node or holds another object of
// its name (gone: departed). It reads the index, which
// a pass reads, not the informer's store, which may be ahead of it (an
// expectation dropped for what the index does not show yet would leave a
// grant in neither).
func (e *expectations) observe(node string) {
	exp, ok := e.get(node)
	if !ok {
		return
	}
	n := e.indexed(node)
	if n == nil || replaced(n, exp) {
		e.gone(node, exp)
		return
	}
	if n.Annotations[v1alpha1.AnnotationGrant] == exp.grant || n.ResourceVersion != exp.rv {
		e.drop(node, exp, "")
	}
}

// settle decides, after the grant write failed with err, whether the grant
// may have landed. An API server's refusal (a 4xx answer: invalid,
// forbidden, conflict, not found, too many requests) means it did not; any
// other error is checked with a GET. When unsure, the expectation stays:
// it is re-checked after the timeout.
func (e *expectations) settle(ctx context.Context, node string, err error, now time.Time) {
	exp, ok := e.get(node)
	if !ok {
		return
	}
	var status apierrors.APIStatus
	if errors.As(err, &status) {
		if code := status.Status().Code; code >= http.StatusBadRequest && code < http.StatusInternalServerError {
			e.drop(node, exp, "the API server refused the grant: "+err.Error())
			return
		}
	}
	e.check(ctx, node, exp, now, false)
}

// check asks the API about exp: the grant is there (keep: the cache will
// show it), the node is at another version without it (drop: the
// conditional write cannot land), or, expired, the node is unchanged
// without it, the write long answered (drop: it never reached the store).
// A node the API no longer has may have taken the grant before it was
// deleted: while the index still holds it the expectation stays (the
// index's delete records its departure, nodeDeleted); once the index no
// longer does, it departs (gone). An error keeps the expectation.
func (e *expectations) check(ctx context.Context, node string, exp expectation, now time.Time, expired bool) {
	gctx, cancel := context.WithTimeout(ctx, writeTimeout)
	defer cancel()
	n, err := e.client.Nodes().Get(gctx, node, metav1.GetOptions{})
	switch {
	case apierrors.IsNotFound(err):
		if e.indexed(node) == nil {
			e.gone(node, exp)
			return
		}
		// Deleted; the index's delete records the departure.
	case err != nil:
		e.log.Warn("check grant expectation: keep counting the node", "node", node, "grant", exp.grant, "err", err)
	case replaced(n, exp):
		// Deleted and registered again: the old object may have taken
		// the grant before it went.
		e.gone(node, exp)
		return
	case n.Annotations[v1alpha1.AnnotationGrant] == exp.grant:
		// Landed; the cache shows it soon.
	case n.ResourceVersion != exp.rv:
		e.drop(node, exp, "the node changed without the grant: the conditional write cannot land")
		return
	case expired:
		e.drop(node, exp, "not observed within "+e.timeout.String()+" and absent from the API")
		return
	}
	e.mu.Lock()
	if cur, ok := e.pending[node]; ok && cur == exp {
		cur.checked = now
		e.pending[node] = cur
	}
	e.mu.Unlock()
}

// expire re-checks with the API every expectation not observed within the
// timeout of its write (or of its last check).
func (e *expectations) expire(ctx context.Context, now time.Time) {
	type due struct {
		node string
		exp  expectation
	}
	var list []due
	e.mu.Lock()
	for n, exp := range e.pending {
		if now.Sub(exp.checked) >= e.timeout {
			list = append(list, due{n, exp})
		}
	}
	e.mu.Unlock()
	for _, d := range list {
		e.check(ctx, d.node, d.exp, now, now.Sub(d.exp.sent) >= e.timeout)
	}
}

// replaced reports whether n is another object than the Node exp's grant
// was written to (departs.UID): that one was deleted and a Node of its name
// registered again.
func replaced(n *corev1.Node, exp expectation) bool {
	return exp.departs.UID != "" && n.UID != exp.departs.UID
}
