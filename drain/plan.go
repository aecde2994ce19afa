package drain

import (
	"errors"
	"fmt"
	"sort"
	"strings"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/labels"
	"k8s.io/apimachinery/pkg/types"
)

// PodRef names a pod; UID tells a pod from its same-named successor (a
// StatefulSet's replacement).
type PodRef struct {
	Namespace, Name string
	UID             types.UID
}

func (r PodRef) String() string { return r.Namespace + "/" + r.Name }

func refOf(p *corev1.Pod) PodRef { return PodRef{Namespace: p.Namespace, Name: p.Name, UID: p.UID} }

// PlannedPod is a pod the drain removes, or waits for, in its batch.
type PlannedPod struct {
	Pod      PodRef
	Behavior Behavior
	// Rule names the rule (or "annotation") that set its order; empty
	// for the default.
	Rule string
	// Terminating pods are already going: they are waited on, not evicted.
	Terminating bool
}

// Batch is a set of pods drained together; a batch is gone before the next
// one starts.
type Batch struct {
	Order int32
	// Priority is the pods' priority when the drain orders by
	// PriorityClass; nil otherwise.
	Priority *int32
	Pods     []PlannedPod
}

// Label names the batch in reports: "order 10" or "order 10, priority 1000".
func (b Batch) Label() string {
	if b.Priority != nil {
		return fmt.Sprintf("order %d, priority %d", b.Order, *b.Priority)
	}
	return fmt.Sprintf("order %d", b.Order)
}

// SkippedPod is a pod the drain leaves alone, or refuses to evict, and why.
type SkippedPod struct {
	Pod    PodRef
	Reason string
}

// Plan is what a drain will do, computed before anything changes.
type Plan struct {
	Node    string
	Batches []Batch
	// Skipped pods stay: DaemonSet and mirror pods, Skip rules, pods
	// terminating for too long.
	Skipped []SkippedPod
	// Finished pods (Succeeded or Failed) are deleted.
	Finished []PodRef
	// Refused pods stop the drain under the Refuse policies.
	Refused []SkippedPod
}

// Pods counts the pods the batches hold.
func (p *Plan) Pods() int {
	n := 0
	for _, b := range p.Batches {
		n += len(b.Pods)
	}
	return n
}

// settled reports whether a plan has nothing left to do: no pod to move or
// wait on, none to delete, none refused. Skipped pods stay.
func (p *Plan) settled() bool {
	return p.Pods() == 0 && len(p.Finished) == 0 && len(p.Refused) == 0
}

// merge adds a later round's plan to p.
func (p *Plan) merge(later *Plan) {
	p.Batches = append(p.Batches, later.Batches...)
	p.Skipped = append(p.Skipped, later.Skipped...)
	p.Finished = append(p.Finished, later.Finished...)
	p.Refused = append(p.Refused, later.Refused...)
}

// markHandled records every pod the plan covers, so that a later round
// only sees pods bound to the node since.
func (p *Plan) markHandled(handled map[types.UID]bool) {
	for _, b := range p.Batches {
		for _, pp := range b.Pods {
			handled[pp.Pod.UID] = true
		}
	}
	for _, refs := range [][]SkippedPod{p.Skipped, p.Refused} {
		for _, s := range refs {
			handled[s.Pod.UID] = true
		}
	}
	for _, ref := range p.Finished {
		handled[ref.UID] = true
	}
}

// describePods names the pods a plan moves or refuses, for reports.
func (p *Plan) describePods() string {
	var names []string
	for _, b := range p.Batches {
		for _, pp := range b.Pods {
			names = append(names, pp.Pod.String())
		}
	}
	for _, r := range p.Refused {
		names = append(names, r.Pod.String()+" (refused)")
	}
	for _, ref := range p.Finished {
		names = append(names, ref.String()+" (finished)")
	}
	return fmt.Sprintf("%d pods: %s", len(names), strings.Join(names, ", "))
}

// unhandled drops the pods an earlier round already covered.
func unhandled(pods []*corev1.Pod, handled map[types.UID]bool) []*corev1.Pod {
	out := pods[:0:0]
	for _, p := range pods {
		if !handled[p.UID] {
			out = append(out, p)
		}
	}
	return out
}

// ErrRefused marks a drain refused before it started, for pods whose
// eviction would lose data or that nothing would recreate.
var ErrRefused = errors.New("drain refused")

// Err returns an error naming every refused pod, or nil.
func (p *Plan) Err() error {
	if len(p.Refused) == 0 {
		return nil
	}
	parts := make([]string, len(p.Refused))
	for i, r := range p.Refused {
		parts[i] = r.Pod.String() + " (" + r.Reason + ")"
	}
	return fmt.Errorf("%w on node %s: %s", ErrRefused, p.Node, strings.Join(parts, "; "))
}

// plan sorts a node's pods into batches, skipped, finished and refused.
func plan(node string, pods []*corev1.Pod, opts Options, now time.Time) (*Plan, error) {
	p := &Plan{Node: node}
	batches := map[batchKey]*Batch{}
	for _, pod := range pods {
		if err := p.add(pod, opts, now, batches); err != nil {
			return nil, err
		}
	}
	p.Batches = sortedBatches(batches)
	return p, nil
}

// batchKey identifies a batch: its order and, with Options.ByPriority,
// its pods' priority.
type batchKey struct{ order, prio int32 }

// add puts pod in p: skipped, finished, refused, or in the batch of its
// order (and priority) in batches.
func (p *Plan) add(pod *corev1.Pod, opts Options, now time.Time, batches map[batchKey]*Batch) error {
	ref := refOf(pod)
	skipReason, finished := triage(pod, opts, now)
	if finished {
		p.Finished = append(p.Finished, ref)
		return nil
	}
	if skipReason != "" {
		p.Skipped = append(p.Skipped, SkippedPod{Pod: ref, Reason: skipReason})
		return nil
	}
	order, behavior, rule, err := opts.Rules.orderOf(pod)
	if err != nil {
		return err
	}
	if behavior == BehaviorSkip {
		p.Skipped = append(p.Skipped, SkippedPod{Pod: ref, Reason: "rule " + rule + " says Skip"})
		return nil
	}
	terminating := pod.DeletionTimestamp != nil
	if behavior == BehaviorEvict && !terminating {
		if reason := refused(pod, opts); reason != "" {
			p.Refused = append(p.Refused, SkippedPod{Pod: ref, Reason: reason})
			return nil
		}
	}
	b := batchOf(batches, order, pod, opts)
	b.Pods = append(b.Pods, PlannedPod{Pod: ref, Behavior: behavior, Rule: rule, Terminating: terminating})
	return nil
}

// triage sorts out, before the rules are consulted, the pods the drain
// leaves alone: it returns why pod is skipped, or finished for a pod that
// has run to completion, or neither.
func triage(pod *corev1.Pod, opts Options, now time.Time) (skipReason string, finished bool) {
	if opts.PodSelector != nil && !opts.PodSelector.Matches(labels.Set(pod.Labels)) {
		return "not selected by the pod selector " + opts.PodSelector.String(), false
	}
	if reason := alwaysSkipped(pod); reason != "" {
		return reason, false
	}
	if pod.Status.Phase == corev1.PodSucceeded || pod.Status.Phase == corev1.PodFailed {
		return "", true
	}
	if pod.DeletionTimestamp != nil && now.Sub(pod.DeletionTimestamp.Time) > opts.SkipTerminatingAfter {
		return fmt.Sprintf("terminating for more than %s; not waited on", opts.SkipTerminatingAfter), false
	}
	return "", false
}

// batchOf returns the batch of pod's order (and, with Options.ByPriority,
// priority), adding it to batches when it is the first of it.
func batchOf(batches map[batchKey]*Batch, order int32, pod *corev1.Pod, opts Options) *Batch {
	k := batchKey{order: order}
	if opts.ByPriority && pod.Spec.Priority != nil {
		k.prio = *pod.Spec.Priority
	}
	b := batches[k]
	if b == nil {
		b = &Batch{Order: order}
		if opts.ByPriority {
			prio := k.prio
			b.Priority = &prio
		}
		batches[k] = b
	}
	return b
}

// sortedBatches returns the batches, each one's pods by name, lowest order
// first and, inside an order, highest priority first.
func sortedBatches(batches map[batchKey]*Batch) []Batch {
	var sorted []Batch
	for _, b := range batches {
		sort.Slice(b.Pods, func(i, j int) bool { return b.Pods[i].Pod.String() < b.Pods[j].Pod.String() })
		sorted = append(sorted, *b)
	}
	sort.Slice(sorted, func(i, j int) bool {
		a, b := sorted[i], sorted[j]
		if a.Order != b.Order {
			return a.Order < b.Order
		}
		if a.Priority != nil && b.Priority != nil {
			return *a.Priority > *b.Priority
		}
		return false
	})
	return sorted
}

// alwaysSkipped: pods a drain never touches.
func alwaysSkipped(pod *corev1.Pod) string {
	if _, mirror := pod.Annotations[corev1.MirrorPodAnnotationKey]; mirror {
		return "mirror (static) pod"
	}
	if ref := metav1.GetControllerOf(pod); ref != nil && ref.Kind == "DaemonSet" {
		return "managed by DaemonSet " + ref.Name
	}
	return ""
}

// refused returns why the Refuse policies keep pod from being evicted.
func refused(pod *corev1.Pod, opts Options) string {
	var reasons []string
	if opts.Unmanaged == Refuse && metav1.GetControllerOf(pod) == nil {
		reasons = append(reasons, "no controller would recreate it (nodeward drain --force, agent --drain-unmanaged=evict to evict it)")
	}
	if opts.EmptyDir == Refuse {
		for _, v := range pod.Spec.Volumes {
			if v.EmptyDir != nil {
				reasons = append(reasons, "emptyDir volume "+v.Name+" would be lost (nodeward drain --delete-emptydir-data, agent --drain-emptydir=evict to evict it)")
				break
			}
		}
	}
	return strings.Join(reasons, "; ")
}
