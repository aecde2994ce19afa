package conditions

import (
	"context"
	"encoding/json"
	"fmt"
	"log/slog"
	"sync"
	"sync/atomic"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/util/retry"

	"github.com/nodeward/nodeward/api/kube"
)

// Publisher writes nodeward's conditions and taints on one Node. It only
// ever writes its own condition types (a strategic merge by type leaves the
// kubelet's conditions alone) and only the taints its TaintTable owns.
type Publisher struct {
	client    *kube.Client
	node      string
	table     TaintTable
	guard     DisruptionGuard
	heartbeat time.Duration
	metrics   *Metrics
	log       *slog.Logger
	now       func() time.Time
	beat      func(busy bool)

	mu       sync.Mutex
	withheld map[string]bool // NoExecute keys already reported withheld

	// Kept by Run: the last heartbeat write, and whether conditions and
	// taints were written at least once (or why not).
	lastBeat time.Time
	settled  atomic.Bool
	lastErr  atomic.Pointer[string]
}

// PublisherConfig wires a Publisher.
type PublisherConfig struct {
	Client *kube.Client
	Node   string
	Taints TaintTable
	// Guard allows NoExecute taints; nil refuses them all.
	Guard DisruptionGuard
	// Heartbeat is how often unchanged conditions are written again;
	// 5 min when zero.
	Heartbeat time.Duration
	Metrics   *Metrics
	Log       *slog.Logger
	// Now is the clock; time.Now when nil.
	Now func() time.Time
	// Beat is called on every turn of Run: busy while it writes. The
	// agent's watchdog follows it. Optional.
	Beat func(busy bool)
}

// NewPublisher builds the writer of one Node's conditions and taints.
func NewPublisher(cfg PublisherConfig) *Publisher {
	if cfg.Now == nil {
		cfg.Now = time.Now
	}
	if cfg.Heartbeat <= 0 {
		cfg.Heartbeat = 5 * time.Minute
	}
	if cfg.Log == nil {
		cfg.Log = slog.Default()
	}
	if cfg.Beat == nil {
		cfg.Beat = func(bool) {}
	}
	return &Publisher{beat: cfg.Beat, client: cfg.Client, node: cfg.Node, table: cfg.Taints, guard: cfg.Guard, heartbeat: cfg.Heartbeat,
		metrics: cfg.Metrics, log: cfg.Log, now: cfg.Now, withheld: map[string]bool{}}
}

// ConditionsOutdated reports whether node lacks one of conds or shows a
// different status or reason; messages alone (which change with every
// measurement) wait for the heartbeat.
func ConditionsOutdated(node *corev1.Node, conds []Condition) bool {
	for _, c := range conds {
		cur := findCondition(node, c.Type)
		if cur == nil || cur.Status != c.Status || cur.Reason != c.Reason {
			return true
		}
	}
	return false
}

// WriteConditions patches conds into node's status, keeping the recorded
// lastTransitionTime of a condition whose status did not change (the agent
// may have restarted). It returns the updated Node.
func (p *Publisher) WriteConditions(ctx context.Context, node *corev1.Node, conds []Condition) (*corev1.Node, error) {
	now := metav1.NewTime(p.now())
	patchConds := make([]corev1.NodeCondition, 0, len(conds))
	var transitioned []Condition
	for _, c := range conds {
		nc := corev1.NodeCondition{
			Type: c.Type, Status: c.Status, Reason: c.Reason, Message: c.Message,
			LastHeartbeatTime: now, LastTransitionTime: metav1.NewTime(c.LastTransition),
		}
		if cur := findCondition(node, c.Type); cur != nil && cur.Status == c.Status {
			nc.LastTransitionTime = cur.LastTransitionTime
		} else {
			transitioned = append(transitioned, c)
		}
		patchConds = append(patchConds, nc)
	}
	data, err := json.Marshal(map[string]any{"status": map[string]any{"conditions": patchConds}})
	if err != nil {
		return nil, fmt.Errorf("encode condition patch: %w", err)
	}
	updated, err := p.client.PatchNodeStatus(ctx, p.node, data)
	if err != nil {
		return nil, fmt.Errorf("patch conditions of node %s: %w", p.node, err)
	}
	for _, c := range transitioned {
		if !c.DetectedAt.IsZero() {
			p.metrics.ObserveWrite(c.Type, p.now().Sub(c.DetectedAt).Seconds())
		}
		p.log.Info("published condition", "node", p.node, "condition", c.Type, "status", c.Status, "reason", c.Reason)
	}
	return updated, nil
}

// DesiredTaints lists the taints conds call for, without any NoExecute
// taint the disruption guard does not allow.
func (p *Publisher) DesiredTaints(ctx context.Context, node *corev1.Node, conds []Condition) []corev1.Taint {
	p.mu.Lock()
	defer p.mu.Unlock()
	var out []corev1.Taint
	for _, t := range p.table.Desired(conds) {
		if t.Effect == corev1.TaintEffectNoExecute && (p.guard == nil || !p.guard(ctx, node, t)) {
			if !p.withheld[t.Key] {
				p.log.Warn("NoExecute taint withheld: the disruption guard does not allow it", "node", p.node, "taint", t.Key)
				p.withheld[t.Key] = true
			}
			continue
		}
		delete(p.withheld, t.Key)
		out = append(out, t)
	}
	return out
}

// TaintsOutdated reports whether node's taints differ from what conds call
// for.
func (p *Publisher) TaintsOutdated(ctx context.Context, node *corev1.Node, conds []Condition) bool {
	_, changed := p.table.Merge(node.Spec.Taints, p.DesiredTaints(ctx, node, conds))
	return changed
}

// WriteTaints brings node's taints in line with conds. The whole list is
// sent with node's resourceVersion as a precondition, so a concurrent
// editor's change is never overwritten: on a conflict the Node is read
// again and the merge redone. Taints nodeward does not own are kept as
// they are. It returns the updated Node (node itself when nothing changed).
func (p *Publisher) WriteTaints(ctx context.Context, node *corev1.Node, conds []Condition) (*corev1.Node, error) {
	desired := p.DesiredTaints(ctx, node, conds)
	current := node
	err := kube.RetryOnConflict(retry.DefaultRetry, func() error {
		if current == nil {
			fresh, err := p.client.Nodes().Get(ctx, p.node, metav1.GetOptions{})
			if err != nil {
				return fmt.Errorf("read node %s: %w", p.node, err)
			}
			current = fresh
		}
		merged, changed := p.table.Merge(current.Spec.Taints, desired)
		if !changed {
			return nil
		}
		data, err := json.Marshal(map[string]any{
			"metadata": map[string]any{"resourceVersion": current.ResourceVersion},
			"spec":     map[string]any{"taints": merged},
		})
		if err != nil {
			return fmt.Errorf("encode taint patch: %w", err)
		}
		updated, err := p.client.Nodes().Patch(ctx, p.node, types.MergePatchType, data, metav1.PatchOptions{})
		if err != nil {
			current = nil // read again before the next attempt
			return err
		}
		p.log.Info("updated taints", "node", p.node, "taints", len(merged), "nodewardTaints", len(desired))
		current = updated
		return nil
	})
	if err != nil {
		return nil, fmt.Errorf("update taints of node %s: %w", p.node, err)
	}
	if current == nil {
		return nil, fmt.Errorf("update taints of node %s: no copy of the node after the retries", p.node)
	}
	return current, nil
}

func findCondition(node *corev1.Node, t corev1.NodeConditionType) *corev1.NodeCondition {
	for i := range node.Status.Conditions {
		if node.Status.Conditions[i].Type == t {
			return &node.Status.Conditions[i]
		}
	}
	return nil
}
