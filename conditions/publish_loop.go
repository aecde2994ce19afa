package conditions

import (
	"context"
	"errors"
	"time"

	corev1 "k8s.io/api/core/v1"
)

const (
	publishRetryMin = 500 * time.Millisecond
	publishRetryMax = 30 * time.Second
)

// errNodeNotSeen: nothing to publish on before the Node was seen.
var errNodeNotSeen = errors.New("own Node not seen yet (does it exist, may the agent watch it?)")

// NodeCache is the agent's one copy of its own Node: the latest the watch
// delivered or a write returned.
type NodeCache interface {
	// Latest returns the freshest copy, nil before the Node was seen.
	Latest() *corev1.Node
	// Observe offers a copy a write returned; the cache keeps the newer.
	Observe(node *corev1.Node)
}

// Run is the only writer of conditions and taints, so writes never race
// each other. It acts when a condition of monitor changes, when the Node
// changes (nodeChanged: someone removed a taint or condition of ours), at
// the heartbeat, and after a failed write with back-off, until ctx ends.
func (p *Publisher) Run(ctx context.Context, monitor *Monitor, nodes NodeCache, nodeChanged <-chan struct{}) {
	heartbeat := time.NewTicker(p.heartbeat)
	defer heartbeat.Stop()
	retry := time.NewTimer(0)
	defer retry.Stop()
	backoff := publishRetryMin
	for {
		heartbeatDue := false
		select {
		case <-ctx.Done():
			return
		case <-monitor.Changes():
		case <-nodeChanged:
		case <-heartbeat.C:
			heartbeatDue = true
		case <-retry.C:
		}
		p.beat(false)
		if !monitor.Ready() {
			// Unknown → Unknown is no change; look again soon.
			retry.Reset(100 * time.Millisecond)
			continue
		}
		p.beat(true)
		err := p.publish(ctx, nodes, monitor.Conditions(), heartbeatDue)
		p.beat(false)
		if err != nil {
			msg := err.Error()
			p.lastErr.Store(&msg)
			p.log.Warn("publishing node health failed; retrying", "node", p.node, "in", backoff, "err", err)
			retry.Reset(backoff)
			backoff = min(2*backoff, publishRetryMax)
			continue
		}
		backoff = publishRetryMin
		p.settled.Store(true)
	}
}

// Settled reports whether conditions and taints were written at least
// once; the reason says what is missing.
func (p *Publisher) Settled() (bool, string) {
	if p.settled.Load() {
		return true, "ok"
	}
	if e := p.lastErr.Load(); e != nil {
		return false, "conditions not yet published: " + *e
	}
	return false, "conditions not yet published"
}

// publish writes conditions when their status or reason differs from the
// Node's, or at the heartbeat (which also refreshes messages), then the
// taints when they differ.
func (p *Publisher) publish(ctx context.Context, nodes NodeCache, conds []Condition, heartbeat bool) error {
	node := nodes.Latest()
	if node == nil {
		return errNodeNotSeen
	}
	if heartbeat || p.lastBeat.IsZero() || p.now().Sub(p.lastBeat) >= p.heartbeat || ConditionsOutdated(node, conds) {
		updated, err := p.WriteConditions(ctx, node, conds)
		if err != nil {
			return err
		}
		p.lastBeat = p.now()
		nodes.Observe(updated)
		node = updated
	}
	if p.TaintsOutdated(ctx, node, conds) {
		updated, err := p.WriteTaints(ctx, node, conds)
		if err != nil {
			return err
		}
		nodes.Observe(updated)
	}
	return nil
}
