package chaos

import (
	"fmt"
	"math/rand/v2"
	"slices"
	"time"
)

// Kind is a kind of fault.
type Kind string

// The faults the chaos run injects.
const (
	// KillAgent: SIGKILL of a node's agent process (and its children),
	// started again after Hold.
	KillAgent Kind = "kill-agent"
	// KillLeader: SIGKILL of the coordinator replica that leads, started
	// again after Hold.
	KillLeader Kind = "kill-leader"
	// KillAPIServer: SIGKILL of kube-apiserver, restarted on the same port
	// after Hold.
	KillAPIServer Kind = "kill-apiserver"
	// KillEtcd: SIGKILL of etcd, restarted on the same data dir after
	// Hold; every other one also kills kube-apiserver first (a control-plane
	// host crash: API server before etcd), restarted after etcd.
	KillEtcd Kind = "kill-etcd"
	// Relabel: a worker node moves to the other worker pool, whatever it
	// is doing.
	Relabel Kind = "relabel"
	// LowerMaxUnavailable: a worker pool's maxUnavailable drops by one
	// (not below 1).
	LowerMaxUnavailable Kind = "lower-maxunavailable"
	// ChangeTarget: a pool's osImage changes to the second image,
	// mid-rollout.
	ChangeTarget Kind = "change-target"
	// AdminCordon: an admin cordons a node (no nodeward cordon record) and
	// uncordons it after Hold.
	AdminCordon Kind = "admin-cordon"
	// PreDrainHook: a pre-drain hook annotation is added to a node and
	// removed after Hold.
	PreDrainHook Kind = "pre-drain-hook"
	// PDBBlock: a pod pinned to a node under a PDB that allows no
	// disruption, deleted after Hold: the node's drain blocks meanwhile.
	PDBBlock Kind = "pdb-block"
	// DeleteNodeRebooting: the Node object of a granted node is deleted
	// while its machine is down for the reboot its agent asked for (as a
	// cloud controller or an admin would); the machine stays down for
	// Hold, then its kubelet registers the Node again (a new UID, the
	// labels it had, none of nodeward's annotations) and the agent starts.
	DeleteNodeRebooting Kind = "delete-node-rebooting"
	// RecreatePool: a worker pool's UpdatePool is deleted and created again
	// with the same spec after Hold, whatever its nodes are doing.
	RecreatePool Kind = "recreate-pool"
	// DrainPolicy: a worker pool's spec.drain.onTimeout switches between
	// Force and Retry, mid-rollout.
	DrainPolicy Kind = "drain-policy"
	// PauseLeader: SIGSTOP of the coordinator replica that leads, for
	// longer than its Lease (10 s), so that the other replica takes over
	// while it is stopped; SIGCONT after Hold. On resuming it may write
	// what it planned before the pause: a grant of a deposed leader,
	// which agents must refuse (the grant's leader term, docs/protocol.md
	// "Fencing").
	PauseLeader Kind = "pause-leader"
	// GateFail: a pool's gate (a query on a real Prometheus) fails for
	// Hold: grants wait, and a node soaking or a canary baking meanwhile
	// halts the pool; the undo makes it pass again and resumes the pool
	// with `nodeward resume` if it was halted.
	GateFail Kind = "gate-fail"
)

// Kinds lists every kind, in report order.
func Kinds() []Kind {
	return []Kind{KillAgent, KillLeader, KillAPIServer, KillEtcd, Relabel, LowerMaxUnavailable, ChangeTarget,
		AdminCordon, PreDrainHook, PDBBlock, DeleteNodeRebooting, RecreatePool, DrainPolicy, PauseLeader, GateFail}
}

// early are the kinds whose first fault Plan places in the first 60% of
// the run, with the target changes: each needs nodes in flight (a granted
// node about to reboot, a pool with grants out, drains under way).
var earlyKinds = []Kind{DeleteNodeRebooting, RecreatePool, DrainPolicy, GateFail}

// weights of the kinds drawn after each kind has had its turn;
// ChangeTarget is placed explicitly.
var weights = []struct {
	kind   Kind
	weight int
}{
	{KillAgent, 6}, {KillLeader, 2}, {KillAPIServer, 2}, {KillEtcd, 2}, {Relabel, 3},
	{LowerMaxUnavailable, 1}, {AdminCordon, 3}, {PreDrainHook, 3}, {PDBBlock, 2},
	{DeleteNodeRebooting, 2}, {RecreatePool, 1}, {DrainPolicy, 2}, {PauseLeader, 1}, {GateFail, 2},
}

// holds bounds each kind's Hold.
var holds = map[Kind][2]time.Duration{
	KillAgent:     {500 * time.Millisecond, 4 * time.Second},
	KillLeader:    {time.Second, 5 * time.Second},
	KillAPIServer: {time.Second, 5 * time.Second},
	KillEtcd:      {time.Second, 5 * time.Second},
	AdminCordon:   {5 * time.Second, 20 * time.Second},
	PreDrainHook:  {5 * time.Second, 20 * time.Second},
	PDBBlock:      {10 * time.Second, 30 * time.Second},
	// How long the machine stays down with its Node deleted.
	DeleteNodeRebooting: {time.Second, 5 * time.Second},
	// How long the pool is gone.
	RecreatePool: {time.Second, 6 * time.Second},
	// Longer than the coordinators' 10 s Lease, so the other replica
	// takes over while the leader is stopped.
	PauseLeader: {12 * time.Second, 16 * time.Second},
	// How long the gate fails: longer than pool a's soak, so that a node
	// soaking when it begins sees it fail.
	GateFail: {3 * time.Second, 10 * time.Second},
}

// Fault is one planned fault.
type Fault struct {
	Kind Kind
	// Gap is the wait before it is injected.
	Gap time.Duration
	// Hold is how long until it is undone (restart, uncordon, removal).
	Hold time.Duration
	// Pick chooses the victim among the candidates when it is injected.
	Pick uint64
}

func (f Fault) String() string {
	return fmt.Sprintf("%s after %s hold %s pick %d", f.Kind, f.Gap.Round(time.Millisecond), f.Hold.Round(time.Millisecond), f.Pick)
}

// Plan draws n faults from seed: every kind at least once (ChangeTarget
// exactly targetChanges times, in the first 60% of the run so that the
// rollout is still going, and the first fault of each early kind there
// too), the rest by weight, each preceded by a gap in
// [gapMin, gapMax). The same seed gives the same plan; which node a fault
// hits also depends on the cluster's state when it is injected.
func Plan(seed int64, n, targetChanges int, gapMin, gapMax time.Duration) []Fault {
	rng := rand.New(rand.NewPCG(uint64(seed), 0x6e6f64657761726b)) // "nodewark"
	var kinds []Kind
	for _, w := range weights {
		kinds = append(kinds, w.kind)
	}
	total := 0
	for _, w := range weights {
		total += w.weight
	}
	for len(kinds) < n-targetChanges {
		x := rng.IntN(total)
		for _, w := range weights {
			if x < w.weight {
				kinds = append(kinds, w.kind)
				break
			}
			x -= w.weight
		}
	}
	rng.Shuffle(len(kinds), func(i, j int) { kinds[i], kinds[j] = kinds[j], kinds[i] })
	// Target changes at distinct positions among the first 60%.
	size := len(kinds) + targetChanges
	early := max(targetChanges, size*6/10)
	at := map[int]bool{}
	for _, i := range rng.Perm(early)[:targetChanges] {
		at[i] = true
	}
	rest := kinds
	kinds = make([]Kind, 0, size)
	for i := range size {
		if at[i] {
			kinds = append(kinds, ChangeTarget)
		} else {
			kinds, rest = append(kinds, rest[0]), rest[1:]
		}
	}
	placeEarly(rng, kinds, earlyKinds)
	plan := make([]Fault, len(kinds))
	for i, k := range kinds {
		f := Fault{Kind: k, Gap: between(rng, gapMin, gapMax), Pick: rng.Uint64()}
		if h, ok := holds[k]; ok {
			f.Hold = between(rng, h[0], h[1])
		}
		plan[i] = f
	}
	return plan
}

// placeEarly moves the first fault of each of kinds into the first 60% of
// plan when it is not there yet, swapping it with a fault there that is
// neither a target change nor of kinds.
func placeEarly(rng *rand.Rand, plan []Kind, kinds []Kind) {
	bound := len(plan) * 6 / 10
	var free []int
	for i := range bound {
		if plan[i] != ChangeTarget && !slices.Contains(kinds, plan[i]) {
			free = append(free, i)
		}
	}
	for _, k := range kinds {
		at := slices.Index(plan, k)
		if at < bound || len(free) == 0 {
			continue
		}
		j := rng.IntN(len(free))
		plan[at], plan[free[j]] = plan[free[j]], plan[at]
		free = slices.Delete(free, j, j+1)
	}
}

func between(rng *rand.Rand, lo, hi time.Duration) time.Duration {
	if hi <= lo {
		return lo
	}
	return lo + time.Duration(rng.Int64N(int64(hi-lo)))
}
