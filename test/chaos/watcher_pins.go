package chaos

import (
	"fmt"
	"time"

	corev1 "k8s.io/api/core/v1"

	v1alpha1 "github.com/nodeward/nodeward/api/v1alpha1"
)

// The drain-policy check: a PDB-blocked pod (the PDBBlock fault's) may
// leave its node before its blocker is lifted only by the force that the
// pool's onTimeout Force allows; under Retry the node must wait.

// pin is a PDB-blocked pod bound to node since at.
type pin struct {
	node string
	at   time.Time
}

// policyChange is a pool's drain policy from at: force when onTimeout is
// Force (anything else never deletes a PDB-blocked pod).
type policyChange struct {
	at    time.Time
	force bool
}

// Pinned tells the watcher that the pod uid, under a PDB that allows no
// disruption, is bound to node.
func (w *Watcher) Pinned(node, uid string) {
	w.mu.Lock()
	defer w.mu.Unlock()
	w.pins[uid] = &pin{node: node, at: w.opts.Now()}
}

// Unpinned tells the watcher that the blocker of pod uid is about to be
// lifted (its ReplicaSet and PDB deleted).
func (w *Watcher) Unpinned(uid string) {
	w.mu.Lock()
	defer w.mu.Unlock()
	delete(w.pins, uid)
}

// trackPolicy records pool's drain policy when it changes; deleted
// records the pool's deletion, after which any policy may be on its
// nodes.
func (w *Watcher) trackPolicy(name string, pool *v1alpha1.UpdatePool, deleted bool) {
	force := deleted || (pool.Spec.Drain != nil && pool.Spec.Drain.OnTimeout == "Force")
	h := w.policies[name]
	if n := len(h); n == 0 || h[n-1].force != force {
		w.policies[name] = append(h, policyChange{at: w.opts.Now(), force: force})
	}
}

// forcePossible reports whether pool's policy may have said Force at
// some moment of [from, to]: it did, or had within PolicyGrace before
// (the coordinator rewrites the policy on the nodes in flight, which takes
// a leader and an API server).
func (w *Watcher) forcePossible(pool string, from, to time.Time) bool {
	h := w.policies[pool]
	if len(h) == 0 || h[0].at.After(from) {
		return true
	}
	for i, c := range h {
		if !c.force {
			continue
		}
		if i+1 == len(h) {
			return !c.at.After(to)
		}
		if !c.at.After(to) && !h[i+1].at.Add(w.opts.PolicyGrace).Before(from) {
			return true
		}
	}
	return false
}

// checkPins runs when node's machine goes down, with the pods bound to it
// then: a pin whose pod is gone (or terminating) with its blocker still in
// place was forced, which its granting pool's policy must have allowed.
func (w *Watcher) checkPins(node string, pods []corev1.Pod, down time.Time) {
	live := map[string]bool{}
	for _, p := range pods {
		if p.DeletionTimestamp == nil {
			live[string(p.UID)] = true
		}
	}
	for uid, p := range w.pins {
		if p.node != node || live[uid] {
			continue
		}
		delete(w.pins, uid)
		pool := ""
		if n := w.lastSeen(node); n != nil {
			pool = n.Annotations[keyGrantPool]
		}
		if r := w.nodes[node]; pool == "" && r != nil {
			pool = r.pool
		}
		if w.forcePossible(pool, p.at, down) {
			w.stats.PinsForced++
			continue
		}
		w.record(Violation{At: down, Kind: VForcedUnderRetry, Pool: pool, Nodes: []string{node},
			Detail: fmt.Sprintf("PDB-blocked pod %s (bound since %s) gone when the machine went down, its blocker in place, "+
				"while pool %s said onTimeout Retry throughout", uid, p.at.Format("15:04:05.000"), pool)})
	}
}
