package daemon

import (
	"github.com/nodeward/nodeward/conditions"

	"context"
	"time"
)

const (
	publishRetryMin = 500 * time.Millisecond
	publishRetryMax = 30 * time.Second
)

// publishLoop is the only writer of conditions and taints, so writes never
// race each other. It acts when a condition changes, when the Node changes
// (someone removed a taint or condition of ours), at the heartbeat, and
// after a failed write with back-off.
func (h *Health) publishLoop(ctx context.Context) {
	heartbeat := time.NewTicker(h.cfg.Config.HeartbeatInterval.Duration)
	defer heartbeat.Stop()
	retry := time.NewTimer(0)
	defer retry.Stop()
	backoff := publishRetryMin
	for {
		beat := false
		select {
		case <-ctx.Done():
			return
		case <-h.monitor.Changes():
		case <-h.kick:
		case <-heartbeat.C:
			beat = true
		case <-retry.C:
		}
		if !h.monitor.Ready() {
			// Unknown → Unknown is no change; look again soon.
			retry.Reset(100 * time.Millisecond)
			continue
		}
		if err := h.publish(ctx, beat); err != nil {
			msg := err.Error()
			h.lastErr.Store(&msg)
			h.log.Warn("publishing node health failed; retrying", "node", h.cfg.NodeName, "in", backoff, "err", err)
			retry.Reset(backoff)
			backoff = min(2*backoff, publishRetryMax)
			continue
		}
		backoff = publishRetryMin
		h.settled.Store(true)
	}
}

// publish writes conditions when their status or reason differs from the
// Node's, or at the heartbeat (which also refreshes messages), then the
// taints when they differ.
func (h *Health) publish(ctx context.Context, heartbeat bool) error {
	node := h.currentNode()
	if node == nil {
		return errNodeNotSeen
	}
	conds := h.monitor.Conditions()
	if heartbeat || h.lastBeat.IsZero() || time.Since(h.lastBeat) >= h.cfg.Config.HeartbeatInterval.Duration ||
		conditions.ConditionsOutdated(node, conds) {
		updated, err := h.publisher.WriteConditions(ctx, node, conds)
		if err != nil {
			return err
		}
		h.lastBeat = time.Now()
		h.setNode(updated)
		node = updated
	}
	if h.publisher.TaintsOutdated(ctx, node, conds) {
		updated, err := h.publisher.WriteTaints(ctx, node, conds)
		if err != nil {
			return err
		}
		h.setNode(updated)
	}
	return nil
}
