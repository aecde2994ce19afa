package chaos

import (
	"fmt"
	"time"

	corev1 "k8s.io/api/core/v1"
)

// The watcher's checks of the agent's steps: the pre-drain gate and the
// drain before a finalize or a reboot.

// checkStep checks the agent's move from step prev to the step cur
// reports (rec.step): past the pre-drain gate only without an overdue
// hook, and to the finalize or the reboot only after a drain.
func (w *Watcher) checkStep(rec *nodeRec, cur *corev1.Node, prev string, now time.Time) {
	switch rec.step {
	case "Cordoning", "Draining":
		if beforeGate(prev) {
			w.checkHooksHonoured(rec, cur, prev, now)
		}
		if rec.step == "Draining" && cur.Spec.Unschedulable {
			rec.drained = true
		}
	case "Finalizing", "Rebooting":
		w.checkDrainedBeforeReboot(rec, cur, prev, now)
	}
}

// checkHooksHonoured records every pre-drain hook that had been on the
// node for longer than the hook grace when it passed the pre-drain gate.
func (w *Watcher) checkHooksHonoured(rec *nodeRec, cur *corev1.Node, prev string, now time.Time) {
	for k, since := range rec.hooks {
		if now.Sub(since) > w.opts.HookGrace {
			w.record(Violation{At: now, Kind: VHookIgnored, Pool: rec.pool, Nodes: []string{cur.Name},
				Detail: fmt.Sprintf("%s → %s with hook %s present for %s (grant %q)", prev, rec.step, k,
					now.Sub(since).Round(time.Millisecond), cur.Annotations[keyStateGrant])})
		}
	}
}

// checkDrainedBeforeReboot: a finalize or a reboot needs Draining seen
// since the node was last schedulable; after a watch gap that may have
// hidden it, the step is counted unverified instead. One record per
// cordon.
func (w *Watcher) checkDrainedBeforeReboot(rec *nodeRec, cur *corev1.Node, prev string, now time.Time) {
	switch {
	case rec.drained || rec.flagged:
	case rec.gap || (rec.reborn && cur.Annotations[keyStateGrant] != cur.Annotations[keyGrant]):
		// Hidden by a gap, or the agent's report from before its machine
		// went down landing on the Node registered since (no grant).
		w.stats.StepsUnverified++
		rec.flagged = true
	default:
		rec.flagged = true
		a := cur.Annotations
		w.record(Violation{At: now, Kind: VRebootUndrained, Pool: rec.pool, Nodes: []string{cur.Name},
			Detail: fmt.Sprintf("%s → %s without Draining since the node was last schedulable (grant %q, target %q, unschedulable %v)",
				prev, rec.step, a[keyStateGrant], a[keyStateTarget], cur.Spec.Unschedulable)})
	}
}

// beforeGate reports whether step comes before the pre-drain gate.
func beforeGate(step string) bool {
	switch step {
	case "", "Idle", "Staging", "Staged", "Granted", "HooksPreDrain", "Done", "Yielded":
		return true
	}
	return false
}
