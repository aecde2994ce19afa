package coordinator

import (
	"fmt"
	"slices"
	"strings"
	"time"

	"github.com/nodeward/nodeward/api/v1alpha1"
)

// planInput is what one reconcile of a pool plans from.
type planInput struct {
	pool *v1alpha1.UpdatePool
	// nodes are the nodes the pool selects, including those another pool
	// selects too (shared: counted, never granted), and the nodes holding a
	// grant the pool issued that it no longer selects (counted until
	// released).
	nodes []nodeView
	// pending holds grants written but not yet seen in the cache
	// (expectations): they count as unavailable, so a stale cache can never
	// push the pool past its budget.
	pending map[string]bool
	// backoff holds nodes whose writes keep failing: not granted for now.
	backoff map[string]bool
	// controlPlaneBusy says why no control-plane node may be granted: one
	// is unavailable already, cluster-wide. Empty when none is.
	controlPlaneBusy string
	// departed are the nodes deleted mid-update that the pool counts as
	// unavailable (departures).
	departed poolDepartures
	// controlPlaneSlots are the control-plane nodes that serve but keep
	// the slot of a finished grant (a soak, a bake), with why: no other
	// control-plane node is granted until it is released, unless this very
	// plan releases it.
	controlPlaneSlots map[string]string
	// machines are the Machines beneath the nodes as of the pass's start.
	machines machineView
	// gates is the gates' verdict for this pass; nil until evaluated.
	gates *gateVerdict
	now   time.Time
}

// poolPlan is what one reconcile of a pool decides.
type poolPlan struct {
	target      string
	limit       int
	machines    int               // nodes the pool alone selects
	unavailable map[string]string // node → why
	grant       []string          // nodes to grant, in order
	release     []string          // nodes whose slot is given back
	yielded     []string          // released because the agent yielded
	setTarget   []string          // nodes whose target annotation is stale
	overlapping []string          // nodes another pool selects too
	updated     int
	ready       int
	degraded    []string
	halted      halt // why nothing is granted until an operator resumes; zero when not halted
	// hold says why no grant was made although nodes need one.
	hold     hold
	inFlight []string // nodes updating under the pool's grants
	queued   int      // managed nodes that need the target and hold no slot
	// startSoak are the Done nodes whose soak starts now: soak-until to
	// write, the slot kept.
	startSoak map[string]time.Time
	// soaking are the nodes keeping their slot after Done (soak, bake),
	// soakOver those whose soak ended and that are released once the
	// gates pass.
	soaking, soakOver []string
	// soakEnds is when the first of the soaks kept in this plan ends
	// (zero: none), so the pool is planned again right then.
	soakEnds time.Time
	// downAfterSoak are the soaking nodes that count as unavailable
	// without their soak too, and why.
	downAfterSoak map[string]string
	canary        canaryPhase
	// queue is the pool's grant queue (spec.order): the order in which
	// targets are handed out and grants given, canaries first.
	queue queueOrder
	// releaseAtDone: a node granted in this plan keeps no slot after Done
	// (no soak, no canary), so its agent releases the grant itself.
	releaseAtDone bool
	// needGates: the plan would grant or end a soak but has no verdict;
	// the controller evaluates the gates and plans again.
	needGates bool
	// gateHalt is the message with which to halt the pool: a gate failed
	// while a node soaked. The controller persists it before anything
	// else.
	gateHalt string
	// updates is what the pool's update source offers, set by the
	// controller after the plan (updateoffer.go); nil without a source.
	updates *updateOffer
}

// planPool decides grants, releases and target writes for one pool. It
// reads as the phases of a rolling update, each a method of the plan that
// fills its own fields: the budget (newPlan), each grant released or kept
// for a soak, how each node counts against the budget, the candidates,
// then the grants or the one hold that says why none.
func planPool(in planInput) (*poolPlan, error) {
	p, b, err := newPlan(in)
	if err != nil {
		return nil, err
	}
	soaks := p.releaseOrSoak(in, b.soak)
	counted := p.count(in, soaks)
	cands := p.candidates(in, counted.down)
	p.setTarget = targetsToSet(b.managed, counted.frozen, p.target, in.pool.Spec.MaxStaging, p.queue)
	if p.halted, err = haltOf(in.pool, p.degraded, p.machines, p.canary.active); err != nil {
		return nil, err
	}
	if p.halted.reason == "" && p.canary.none != "" {
		// Fail closed: a canary no node can be halts the pool rather
		// than letting it go on untested.
		p.halted = halt{haltNoCanary, p.canary.none}
	}
	p.endSoaks(in)
	p.endCanary(b.fullLimit)
	// A grant of this pass whose node keeps no slot after Done is given
	// back by its agent in its Done report (AnnotationReleaseAtDone). A
	// canary's never is: which canary is the last, and bakes, is decided
	// when it reports Done. A soak of zero ("0s") is no soak; one that does
	// not parse keeps the coordinator's release, which reports the error.
	soak, soakErr := parseDuration(in.pool.Spec.Soak, "soak")
	p.releaseAtDone = !p.canary.active && soakErr == nil && soak == 0
	if err := p.decideGrants(in, cands, counted.busyZones); err != nil {
		return nil, err
	}
	p.inFlight = inFlight(in, p)
	return p, nil
}

// budget is what the first phase resolves from the spec: the managed
// nodes, the soak a Done seen now starts, and maxUnavailable before a
// canary narrowed it.
type budget struct {
	managed   []*nodeView
	soak      time.Duration
	fullLimit int
}

// newPlan starts the plan with the pool's budget: maxUnavailable over the
// nodes it manages, narrowed to one while a canary runs.
func newPlan(in planInput) (*poolPlan, budget, error) {
	spec := in.pool.Spec
	p := &poolPlan{target: spec.OSImage, unavailable: map[string]string{}, startSoak: map[string]time.Time{},
		downAfterSoak: map[string]string{}}
	// Pointers into in.nodes: a nodeView is 360 bytes, and at 10,000 nodes
	// copying views into these slices (and sorting them) was most of a
	// pass (BenchmarkPlanPass).
	b := budget{managed: make([]*nodeView, 0, len(in.nodes))}
	for i := range in.nodes {
		if in.nodes[i].managed() {
			b.managed = append(b.managed, &in.nodes[i])
		}
	}
	p.machines = len(b.managed)
	var err error
	if b.fullLimit, err = MaxUnavailable(spec, p.machines); err != nil {
		return nil, b, err
	}
	if p.queue, err = queueOf(spec.Order); err != nil {
		return nil, b, err
	}
	if p.canary, err = canaryOf(spec, b.managed, p.target); err != nil {
		return nil, b, err
	}
	p.limit = b.fullLimit
	if p.canary.active {
		p.limit = min(p.limit, 1)
	}
	if b.soak, err = soakFor(spec, p.canary); err != nil {
		return nil, b, err
	}
	return p, b, nil
}

// releaseOrSoak is the second phase: each finished grant is released now
// or kept for a soak after Done. It returns each node's soak step, by its
// index in in.nodes.
func (p *poolPlan) releaseOrSoak(in planInput, soak time.Duration) []soakStep {
	steps := make([]soakStep, len(in.nodes))
	for i := range in.nodes {
		steps[i] = p.planRelease(&in.nodes[i], &in, soak)
	}
	return steps
}

// counted is what the counting phase leaves for the later ones.
type counted struct {
	// frozen are the nodes granted, being granted or released: their
	// target stays.
	frozen map[string]bool
	// busyZones are the zones with a node updating, which confine the
	// next grants (pickGrants).
	busyZones map[string]bool
	// down says, by index in in.nodes, whether the node counts as
	// unavailable: the candidates phase reads it rather than the
	// unavailable map (a hash of every name at 10,000 nodes).
	down []bool
}

// count is the third phase: how each node counts against the budget (a
// node kept for a soak counts as unavailable), and the pool's tallies of
// the nodes it manages.
func (p *poolPlan) count(in planInput, soaks []soakStep) counted {
	c := counted{frozen: map[string]bool{}, busyZones: map[string]bool{}, down: make([]bool, len(in.nodes))}
	releasing := make(map[string]bool, len(p.release))
	for _, n := range p.release {
		releasing[n] = true
	}
	for i := range in.nodes {
		n := &in.nodes[i]
		if n.selected && n.shared {
			p.overlapping = append(p.overlapping, n.name)
		}
		if n.granted() || in.pending[n.name] {
			c.frozen[n.name] = true
		}
		down, why := countAs(n, in.pending)
		if !down && releasing[n.name] {
			// Its grant was finished in the cache this plan reads; the
			// node may have moved on since (a new agent after its state
			// was lost reports on no grant). It counts until the release
			// is seen, so no grant of this pass rests on that copy.
			down, why = true, releasingWhy
		}
		if step := soaks[i]; step != soakNone {
			if down {
				p.downAfterSoak[n.name] = why
			}
			down, why = true, step.why(n.soakUntil)
			c.busyZones[n.zone] = true
		}
		if down {
			c.down[i] = true
			p.unavailable[n.name] = why
			if in.pending[n.name] || (n.granted() && !n.finished()) {
				c.busyZones[n.zone] = true
			}
		}
		if n.managed() {
			p.tally(n, in.pending, down)
		}
	}
	for name, dn := range in.departed.counted {
		p.unavailable[name] = departedWhy + " (grant " + dn.Grant + ", since " + dn.Since.UTC().Format(time.RFC3339) + ")"
		c.busyZones[dn.Zone] = true
	}
	return c
}

// tally counts a managed node in the pool's figures.
func (p *poolPlan) tally(n *nodeView, pending map[string]bool, down bool) {
	if n.updated(p.target) {
		p.updated++
	}
	if n.degraded(p.target) {
		p.degraded = append(p.degraded, n.name)
	}
	if p.target != "" && !n.updated(p.target) && !n.granted() && !pending[n.name] {
		p.queued++
	}
	if !down {
		p.ready++
	}
}

// candidacy is what the candidates phase finds: the nodes that may be
// granted, and what the hold reads of the others.
type candidacy struct {
	nodes []*nodeView
	// staging counts the available nodes that need the target but have
	// not staged it yet.
	staging int
	// left: a managed node does not run the target yet; drainBlocked: a
	// granted node's drain waits (a PDB, an eviction, a hook).
	left, drainBlocked bool
}

// candidates is the fourth phase. Only a node that staged the target is
// granted: the download happens outside the slot, and the staging budget
// holds. A node that cannot stage would not get further with a slot
// either; its agent reports why. While a canary selector is active, only
// its nodes are.
func (p *poolPlan) candidates(in planInput, down []bool) candidacy {
	var c candidacy
	for i := range in.nodes {
		n := &in.nodes[i]
		if !n.managed() || n.updated(p.target) {
			continue
		}
		c.left = true
		c.drainBlocked = c.drainBlocked || (n.granted() && !n.finished() && n.drainBlocked && n.state.DrainPhase())
		if down[i] || n.granted() || n.held || p.target == "" ||
			(p.canary.active && p.canary.bySelector && !n.canary) {
			continue
		}
		switch {
		case n.target != p.target || n.staged != p.target:
			c.staging++
		case !in.backoff[n.name]:
			c.nodes = append(c.nodes, n)
		}
	}
	return c
}

// endCanary lets the pool go on at fullLimit in the pass in which the last
// canary's bake ends, rather than one pass later.
func (p *poolPlan) endCanary(fullLimit int) {
	if p.canary.active && !p.canary.bySelector && p.canary.done+len(p.release) >= p.canary.total && p.halted.reason == "" &&
		len(p.soaking) == 0 && p.bakeEnded() {
		p.canary.active, p.limit = false, fullLimit
	}
}

// bakeEnded reports whether every node released in this pass is one whose
// soak ended: releases of other kinds (a yield) are not canaries done.
func (p *poolPlan) bakeEnded() bool {
	for _, n := range p.release {
		if !slices.Contains(p.soakOver, n) {
			return false
		}
	}
	return len(p.release) > 0
}

// releasingWhy is how a node whose slot this plan gives back counts: as
// unavailable until the release is seen, so that the next grant never
// rests on the cached copy that said its grant was finished.
const releasingWhy = "slot being released (counted until the release is seen)"

// endSoak releases nodes whose soak ends in this plan; they count as
// unavailable until the release is seen (releasingWhy), or as they would
// without the grant when that is worse.
func (p *poolPlan) endSoak(nodes []string) {
	for _, n := range nodes {
		p.release = append(p.release, n)
		if why, down := p.downAfterSoak[n]; down {
			p.unavailable[n] = why
		} else {
			p.unavailable[n] = releasingWhy
		}
	}
}

// planRelease decides what happens to n's grant: released now, or kept
// for a soak after Done (soak is the soak a Done seen now starts). It
// returns n's soak step, soakNone when n does not soak.
func (p *poolPlan) planRelease(n *nodeView, in *planInput, soak time.Duration) soakStep {
	release, yielded := releasable(n, in.pool.Name, p.target)
	if !release || in.pending[n.name] {
		return soakNone
	}
	step := soakNone
	if !yielded {
		step = soakOf(n, soak, in.now)
	}
	switch step {
	case soakStart:
		p.startSoak[n.name] = soakEnd(in.now, soak)
		p.soaking = append(p.soaking, n.name)
		p.nextSoakEnd(p.startSoak[n.name])
	case soakOn:
		p.soaking = append(p.soaking, n.name)
		p.nextSoakEnd(n.soakUntil)
	case soakOver:
		p.soakOver = append(p.soakOver, n.name)
	default:
		p.release = append(p.release, n.name)
		if yielded {
			p.yielded = append(p.yielded, n.name)
		}
	}
	return step
}

// nextSoakEnd keeps the earliest end of a soak in the plan.
func (p *poolPlan) nextSoakEnd(t time.Time) {
	if p.soakEnds.IsZero() || t.Before(p.soakEnds) {
		p.soakEnds = t
	}
}

// endSoaks releases the nodes whose soak is over once the gates pass, and
// calls for a halt when a gate fails while nodes soak. A halted pool's
// soaks end at once: nothing follows them until an operator resumes.
func (p *poolPlan) endSoaks(in planInput) {
	if p.halted.reason != "" {
		clear(p.startSoak)
		p.endSoak(p.soakOver)
		p.endSoak(p.soaking)
		return
	}
	if len(p.soaking)+len(p.soakOver) == 0 {
		return
	}
	if in.pool.Spec.Gates == nil {
		p.endSoak(p.servingAfterSoak())
		return
	}
	switch v := in.gates; {
	case v == nil:
		p.needGates = true
	case v.passing:
		p.endSoak(p.servingAfterSoak())
	default:
		p.gateHalt = fmt.Sprintf("gate failed while %s soaked: %s: %s", strings.Join(append(slices.Clone(p.soaking), p.soakOver...), ", "), v.reason, v.message)
	}
}

// servingAfterSoak returns the nodes whose soak is over that serve again.
// The others keep their slot, soaking, until they do (a node event plans
// the pool again then): a soak, and a canary's bake, passes only on a node
// that serves. Released NotReady, the last canary would end the canary
// phase as if it had passed.
func (p *poolPlan) servingAfterSoak() []string {
	var serving []string
	for _, n := range p.soakOver {
		why, down := p.downAfterSoak[n]
		if !down {
			serving = append(serving, n)
			continue
		}
		p.soaking = append(p.soaking, n)
		p.unavailable[n] = "soak over, kept until it serves again: " + why
	}
	p.soakOver = serving
	return serving
}

// countAs is how node counts against the budget: a grant written but not
// yet observed counts; otherwise v1alpha1.Unavailable, with a finished
// grant ignored (nodeView.unavailable).
func countAs(n *nodeView, pending map[string]bool) (bool, string) {
	if pending[n.name] {
		return true, "updating (grant not yet observed)"
	}
	return n.unavailable()
}

// releasable decides whether pool releases node's grant now, and whether
// because the agent yielded (docs/protocol.md, "A slot's life"): the pool
// that issued the grant (or, when that is unknown, any pool selecting the
// node) releases it once the agent reports Done or Yielded for it, whatever
// target the report names; the issuing pool releases a Degraded grant once
// its target is no longer the one the grant was for.
func releasable(n *nodeView, pool, target string) (release, yielded bool) {
	if !n.granted() || n.stateGrnt != n.grant {
		return false, false
	}
	owner := n.owner == pool
	switch n.state {
	case v1alpha1.StepDone:
		return owner || n.owner == "", false
	case v1alpha1.StepYielded:
		return owner || n.owner == "", true
	case v1alpha1.StepDegraded:
		return owner && n.grantTarget != target, false
	}
	return false, false
}
