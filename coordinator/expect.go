package coordinator

import (
	"context"
	"errors"
	"net/http"
	"time"

	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/nodeward/nodeward/api/v1alpha1"
)

// expectation is a grant the coordinator wrote (or is writing) that its
// node cache has not shown yet; the node counts as unavailable meanwhile.
// The grant write is conditional on rv, the node's resourceVersion the
// plan saw, so once the node is at any other version without the grant,
// the write can no longer land.
type expectation struct {
	grant   string
	rv      string
	sent    time.Time // when the write was sent (Options.Now)
	checked time.Time // when the API was last asked about it
}

// expect records the expectation before the grant is written.
func (c *Controller) expect(node, grant, rv string, now time.Time) {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.pending[node] = expectation{grant: grant, rv: rv, sent: now, checked: now}
}

// pendingNodes copies the expectations' nodes.
func (c *Controller) pendingNodes() map[string]bool {
	c.mu.Lock()
	defer c.mu.Unlock()
	out := make(map[string]bool, len(c.pending))
	for n := range c.pending {
		out[n] = true
	}
	return out
}

// drop removes node's expectation if it is still exp.
func (c *Controller) drop(node string, exp expectation, why string) {
	c.mu.Lock()
	cur, ok := c.pending[node]
	if ok && cur == exp {
		delete(c.pending, node)
	}
	c.mu.Unlock()
	if ok && cur == exp && why != "" {
		c.opts.Log.Info("grant expectation dropped", "node", node, "grant", exp.grant, "why", why)
	}
}

// observe drops node's expectation once the index shows the grant, or
// shows the node at another version without it (the conditional write can
// no longer land), or no longer holds the node. It reads the index, which
// a pass reads, not the informer's store, which may be ahead of it (an
// expectation dropped for what the index does not show yet would leave a
// grant in neither).
func (c *Controller) observe(node string) {
	c.mu.Lock()
	exp, ok := c.pending[node]
	c.mu.Unlock()
	if !ok {
		return
	}
	n := c.index.node(node)
	if n == nil {
		c.drop(node, exp, "node deleted")
		return
	}
	if n.Annotations[v1alpha1.AnnotationGrant] == exp.grant || n.ResourceVersion != exp.rv {
		c.drop(node, exp, "")
	}
}

// settle decides, after the grant write failed with err, whether the grant
// may have landed. An API server's refusal (a 4xx answer: invalid,
// forbidden, conflict, not found, too many requests) means it did not; any
// other error is checked with a GET. When unsure, the expectation stays:
// it is re-checked after expectationTimeout.
func (c *Controller) settle(ctx context.Context, node string, err error, now time.Time) {
	c.mu.Lock()
	exp, ok := c.pending[node]
	c.mu.Unlock()
	if !ok {
		return
	}
	var status apierrors.APIStatus
	if errors.As(err, &status) {
		if code := status.Status().Code; code >= http.StatusBadRequest && code < http.StatusInternalServerError {
			c.drop(node, exp, "the API server refused the grant: "+err.Error())
			return
		}
	}
	c.check(ctx, node, exp, now, false)
}

// check asks the API about exp: the grant is there (keep: the cache will
// show it), the node is at another version without it, or gone (drop: the
// conditional write cannot land), or, expired, the node is unchanged
// without it, the write long answered (drop: it never reached the store).
// An error keeps the expectation.
func (c *Controller) check(ctx context.Context, node string, exp expectation, now time.Time, expired bool) {
	gctx, cancel := context.WithTimeout(ctx, writeTimeout)
	defer cancel()
	n, err := c.opts.Client.Nodes().Get(gctx, node, metav1.GetOptions{})
	switch {
	case apierrors.IsNotFound(err):
		c.drop(node, exp, "node deleted")
		return
	case err != nil:
		c.opts.Log.Warn("check grant expectation: keep counting the node", "node", node, "grant", exp.grant, "err", err)
	case n.Annotations[v1alpha1.AnnotationGrant] == exp.grant:
		// Landed; the cache shows it soon.
	case n.ResourceVersion != exp.rv:
		c.drop(node, exp, "the node changed without the grant: the conditional write cannot land")
		return
	case expired:
		c.drop(node, exp, "not observed within "+c.opts.ExpectationTimeout.String()+" and absent from the API")
		return
	}
	c.mu.Lock()
	if cur, ok := c.pending[node]; ok && cur == exp {
		cur.checked = now
		c.pending[node] = cur
	}
	c.mu.Unlock()
}

// expire re-checks with the API every expectation not observed within
// ExpectationTimeout of its write (or of its last check).
func (c *Controller) expire(ctx context.Context, now time.Time) {
	type due struct {
		node string
		exp  expectation
	}
	var list []due
	c.mu.Lock()
	for n, e := range c.pending {
		if now.Sub(e.checked) >= c.opts.ExpectationTimeout {
			list = append(list, due{n, e})
		}
	}
	c.mu.Unlock()
	for _, d := range list {
		c.check(ctx, d.node, d.exp, now, now.Sub(d.exp.sent) >= c.opts.ExpectationTimeout)
	}
}
