package chaos

import (
	"context"
	"fmt"
	"slices"
	"sort"
	"strings"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/fields"
)

// What the watcher tells the run: its machine-side pod check, its
// violations, counters and view of the nodes.

// Stats are the watcher's counters.
type Stats struct {
	NodeEvents, PoolEvents int
	// Gaps counts relists after a watch could not resume (the API server
	// restarted and the resourceVersion had expired).
	Gaps int
	// Grants counts new grants checked against their pool's budget.
	Grants int
	// MaxDisrupted is the most disrupted nodes seen at once per pool.
	MaxDisrupted map[string]int
	// RebootsChecked counts machine reboots whose pods were checked;
	// RebootsUnverified those the API did not answer for in time.
	RebootsChecked, RebootsUnverified int
	// StepsUnverified counts finalizations after a watch gap hid the
	// node's steps, and stale reports of them on a Node registered again
	// (the pod check at the reboot still applies).
	StepsUnverified int
	// Departures counts Nodes deleted holding an unfinished grant;
	// PinsForced the PDB-blocked pods a drain removed under Force.
	Departures, PinsForced int
	// Halts counts the halts seen on the pools (a gate that failed while
	// a node soaked).
	Halts int
}

// CheckDrained is called when node's machine goes down (before the agent
// dies): every pod bound to it before then must be gone, since the drain
// waits for evicted pods to disappear. The API is asked directly (a quorum
// read), for up to 10 s; a reboot it could not check is counted
// unverified.
func (w *Watcher) CheckDrained(ctx context.Context, node string, down time.Time) {
	var pods *corev1.PodList
	deadline := time.Now().Add(10 * time.Second)
	for {
		lctx, cancel := context.WithTimeout(ctx, 3*time.Second)
		var err error
		pods, err = w.opts.Client.CoreV1().Pods("").List(lctx, metav1.ListOptions{
			FieldSelector: fields.OneTermEqualSelector("spec.nodeName", node).String()})
		cancel()
		if err == nil {
			break
		}
		if time.Now().After(deadline) || ctx.Err() != nil {
			w.mu.Lock()
			w.stats.RebootsUnverified++
			w.mu.Unlock()
			w.opts.Log("watcher: reboot of %s at %s not checked: %v", node, down.Format("15:04:05.000"), err)
			return
		}
		sleep(ctx, 250*time.Millisecond)
	}
	var left []string
	for _, p := range pods.Items {
		if p.Status.Phase == corev1.PodSucceeded || p.Status.Phase == corev1.PodFailed {
			continue
		}
		// Timestamps have a one-second resolution: a pod created in the
		// second of the reboot or later is not the drain's.
		if !p.CreationTimestamp.Time.Before(down.Add(-time.Second)) {
			continue
		}
		if t := scheduledAt(&p); !t.IsZero() && !t.Before(down.Add(-time.Second)) {
			continue
		}
		state := "running"
		if p.DeletionTimestamp != nil {
			state = "terminating"
		}
		left = append(left, fmt.Sprintf("%s/%s (%s, created %s, scheduled %s)", p.Namespace, p.Name, state,
			p.CreationTimestamp.Format("15:04:05"), scheduledAt(&p).Format("15:04:05")))
	}
	w.mu.Lock()
	defer w.mu.Unlock()
	w.stats.RebootsChecked++
	w.checkPins(node, pods.Items, down)
	if len(left) > 0 {
		slices.Sort(left)
		rec := w.nodes[node]
		desc, pool, cordoned := "", "", ""
		if rec != nil {
			desc, pool, cordoned = w.describe([]string{node}), rec.pool, rec.cordonedAt.Format("15:04:05.000")
		}
		w.record(Violation{At: down, Kind: VRebootUndrained, Pool: pool, Nodes: []string{node},
			Detail: fmt.Sprintf("machine went down with %d pods still bound: %s; node cordoned (as the watcher saw it) at %s; %s",
				len(left), strings.Join(left, ", "), cordoned, desc)})
	}
}

func scheduledAt(p *corev1.Pod) time.Time {
	for _, c := range p.Status.Conditions {
		if c.Type == corev1.PodScheduled && c.Status == corev1.ConditionTrue {
			return c.LastTransitionTime.Time
		}
	}
	return time.Time{}
}

// Violations returns a copy of every violation recorded so far, the
// grants written while their pool was halted last (judged on the whole
// record: see watcher_halts.go).
func (w *Watcher) Violations() []Violation {
	w.mu.Lock()
	defer w.mu.Unlock()
	return append(slices.Clone(w.violations), w.halts.violations()...)
}

// Stats returns a copy of the counters.
func (w *Watcher) Stats() Stats {
	w.mu.Lock()
	defer w.mu.Unlock()
	s := w.stats
	s.Halts = len(w.halts.spans)
	s.MaxDisrupted = map[string]int{}
	for k, v := range w.stats.MaxDisrupted {
		s.MaxDisrupted[k] = v
	}
	return s
}

// NodeView is what the watcher last saw of a node.
type NodeView struct {
	Name, Pool, PoolTarget   string
	GrantPool                string
	State, StateTarget       string
	Grant                    string
	CordonRecord             bool
	Unschedulable, Disrupted bool
	Hooks                    int
}

// Nodes returns the watcher's view of every node, by name.
func (w *Watcher) Nodes() []NodeView {
	w.mu.Lock()
	defer w.mu.Unlock()
	out := make([]NodeView, 0, len(w.nodes))
	for name, r := range w.nodes {
		a := r.node.Annotations
		_, rec := a[keyCordonedBy]
		v := NodeView{Name: name, Pool: r.pool, State: a[keyState], StateTarget: a[keyStateTarget], Grant: a[keyGrant], GrantPool: a[keyGrantPool],
			CordonRecord: rec, Unschedulable: r.node.Spec.Unschedulable, Disrupted: disrupted(r.node), Hooks: len(r.hooks)}
		if p := w.pools[r.pool]; p != nil {
			v.PoolTarget = p.target
		}
		out = append(out, v)
	}
	sort.Slice(out, func(i, j int) bool { return out[i].Name < out[j].Name })
	return out
}

// Settled reports whether v is at the end of its rollout: Done on its
// pool's target, no grant, no cordon of any kind, no hook.
func (v NodeView) Settled() bool {
	return v.Pool != "" && v.State == "Done" && v.StateTarget == v.PoolTarget && v.Grant == "" &&
		!v.CordonRecord && !v.Unschedulable && v.Hooks == 0
}

// Updated reports whether v is Done on its pool's target (the rollout has
// reached it, whatever else is on it).
func (v NodeView) Updated() bool {
	return v.Pool != "" && v.State == "Done" && v.StateTarget == v.PoolTarget
}
