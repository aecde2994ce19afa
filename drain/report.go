package drain

import (
	"context"
	"encoding/json"
	"fmt"
	"slices"
	"sort"
	"sync"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"

	"github.com/nodeward/nodeward/api/kube"
)

// ProgressKind names a step of a drain shown to a human.
type ProgressKind string

const (
	ProgressBatch    ProgressKind = "batch"    // a batch starts
	ProgressEvicted  ProgressKind = "evicted"  // eviction accepted
	ProgressGone     ProgressKind = "gone"     // the pod left the node
	ProgressDeleted  ProgressKind = "deleted"  // a finished pod was deleted
	ProgressBlocked  ProgressKind = "blocked"  // a pod blocks; Message says why
	ProgressForced   ProgressKind = "forced"   // deleted past the timeout (force)
	ProgressTimedOut ProgressKind = "timedout" // the overall timeout passed
)

// Progress is one step of a drain, for CLIs and logs.
type Progress struct {
	Kind    ProgressKind
	Batch   string
	Pod     PodRef
	Message string
}

// maxMessage bounds condition and Event messages (Events allow 1 KiB).
const maxMessage = 1000

// blockerSet holds the current blockers and publishes them, at most once
// per reportEvery, as the Drained condition, an Event and a metric.
type blockerSet struct {
	d *Drainer

	mu       sync.Mutex
	blockers map[PodRef]Blocker
	written  string // last message published
}

func newBlockerSet(d *Drainer) *blockerSet {
	return &blockerSet{d: d, blockers: map[PodRef]Blocker{}}
}

func (s *blockerSet) set(b Blocker) {
	s.mu.Lock()
	_, known := s.blockers[b.Pod]
	s.blockers[b.Pod] = b
	s.mu.Unlock()
	if !known {
		s.d.progress(Progress{Kind: ProgressBlocked, Pod: b.Pod, Message: b.String()})
	}
}

func (s *blockerSet) current(ref PodRef) (Blocker, bool) {
	s.mu.Lock()
	defer s.mu.Unlock()
	b, ok := s.blockers[ref]
	return b, ok
}

func (s *blockerSet) clear(ref PodRef) {
	s.mu.Lock()
	delete(s.blockers, ref)
	s.mu.Unlock()
}

func (s *blockerSet) list() []Blocker {
	s.mu.Lock()
	defer s.mu.Unlock()
	out := make([]Blocker, 0, len(s.blockers))
	for _, b := range s.blockers {
		out = append(out, b)
	}
	sort.Slice(out, func(i, j int) bool { return out[i].Pod.String() < out[j].Pod.String() })
	return out
}

// publish writes the condition and an Event when the blockers changed.
func (s *blockerSet) publish(ctx context.Context) {
	blockers := s.list()
	s.d.metrics.setBlocked(len(blockers))
	if len(blockers) == 0 {
		return
	}
	msg := summarize(blockers, maxMessage)
	s.mu.Lock()
	changed := msg != s.written
	s.written = msg
	s.mu.Unlock()
	if !changed {
		return
	}
	s.d.log.Warn("drain blocked", "pods", len(blockers), "report", msg)
	s.d.event(corev1.EventTypeWarning, "DrainBlocked", msg)
	s.d.setDrained(ctx, corev1.ConditionFalse, "DrainBlocked", msg)
}

// loop publishes every reportEvery until ctx ends.
func (s *blockerSet) loop(ctx context.Context, every time.Duration) {
	t := time.NewTicker(every)
	defer t.Stop()
	for {
		select {
		case <-ctx.Done():
			return
		case <-t.C:
			s.publish(ctx)
		}
	}
}

func (d *Drainer) progress(p Progress) {
	if d.cfg.Progress != nil {
		d.cfg.Progress(p)
	}
}

func (d *Drainer) event(eventType, reason, msg string) {
	if d.cfg.Recorder == nil || d.opts.DryRun {
		return
	}
	ref := &corev1.ObjectReference{APIVersion: "v1", Kind: "Node", Name: d.node, UID: types.UID(d.node)}
	d.cfg.Recorder.Event(ref, eventType, reason, msg)
}

// setDrained patches the node's Drained condition; a failure is logged,
// not returned: the report must never stop the drain it reports on.
func (d *Drainer) setDrained(ctx context.Context, status corev1.ConditionStatus, reason, msg string) {
	if d.opts.DryRun {
		return
	}
	if err := SetCondition(ctx, d.client, d.node, ConditionDrained, status, reason, msg); err != nil {
		d.log.Warn("cannot publish the Drained condition", "error", err)
	}
}

// drainedIs reports whether the node's Drained condition has status and
// one of reasons now (one read of the node).
func (d *Drainer) drainedIs(ctx context.Context, status corev1.ConditionStatus, reasons ...string) bool {
	n, err := d.client.Nodes().Get(ctx, d.node, metav1.GetOptions{})
	if err != nil {
		return false
	}
	for _, c := range n.Status.Conditions {
		if c.Type == ConditionDrained {
			return c.Status == status && slices.Contains(reasons, c.Reason)
		}
	}
	return false
}

// SetCondition patches one condition of a node's status, keeping its
// lastTransitionTime when the status does not change.
func SetCondition(ctx context.Context, client *kube.Client, node string, t corev1.NodeConditionType,
	status corev1.ConditionStatus, reason, msg string) error {
	cur, err := client.Nodes().Get(ctx, node, metav1.GetOptions{})
	if err != nil {
		return fmt.Errorf("read node %s: %w", node, err)
	}
	now := metav1.Now()
	cond := corev1.NodeCondition{Type: t, Status: status, Reason: reason, Message: msg,
		LastHeartbeatTime: now, LastTransitionTime: now}
	for _, c := range cur.Status.Conditions {
		if c.Type == t {
			if c.Status == status && c.Reason == reason && c.Message == msg {
				return nil
			}
			if c.Status == status {
				cond.LastTransitionTime = c.LastTransitionTime
			}
		}
	}
	patch, err := json.Marshal(map[string]any{"status": map[string]any{"conditions": []corev1.NodeCondition{cond}}})
	if err != nil {
		return fmt.Errorf("encode %s condition: %w", t, err)
	}
	if _, err := client.PatchNodeStatus(ctx, node, patch); err != nil {
		return fmt.Errorf("set condition %s=%s on node %s: %w", t, status, node, err)
	}
	return nil
}
