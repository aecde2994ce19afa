// Package protosim is the protocol simulator: the real coordinator planning
// code and the real agent state machine (daemon/update, through its ports)
// driven by a seeded scheduler over an in-memory model of the API server,
// the hosts (staged and booted deployments, locked finalization lost on a
// reboot), reboots and a clock. Faults — coordinator failover with a stale
// cache, agent kill -9 between any two steps, state-directory loss, power
// cuts, API writes that fail, nodes relabelled between pools, pool edits,
// Node delete and re-create, kubelet conditions flapping, admin cordons,
// hooks, PDB-blocked drains — interleave with the agents' and the
// coordinator's steps, and the invariants of docs/protocol.md are checked
// after every event with the product's own definition of unavailable
// (api/v1alpha1.Unavailable).
//
// The coordinator is coordinator.Decide, which follows the controller's
// reconcile: plan, the gates evaluated when the plan wants a verdict and
// planned again, the pool read afresh before slot writes and planned
// again when it changed, the departed nodes and a gate's halt written to
// the pool, then the node writes (drain policies of nodes in flight
// included).
//
// A schedule plays one of three modes. The classic mode (DefaultScenario) is
// what every seed played before the extended one existed, draw for draw:
// the corpus's unmarked seeds replay the schedules they failed on. The
// extended mode (ExtendedScenario) adds, all drawn
// from a second stream (World.ext) so that the classic draws stay as they
// were: pools with annotations and a generation, read through a pool
// cache that lags the API and confirmed by a quorum read (FreshPool);
// gates whose verdict is drawn per evaluation and turns sick and healthy
// over time; soaks; canaries of a count, of a selector, of a selector that
// selects nothing; halts written by the coordinator and cleared by an
// operator's resume; drain policy edits; pools deleted and created again
// (same name, new UID); and Nodes deleted while their machine reboots,
// whose kubelet registers a new Node when the machine boots. Its checks
// (invariants_ext.go): no grant from a pool the API lacks, paused or
// halted; one canary at a time until baked and only the selector's; a
// machine whose Node was deleted under a grant counts as disrupted until
// a Node of its name serves again. The fenced mode (FencedScenario, what
// fresh seeds play) adds the grants' leader terms and a leader paused
// between its plan and its writes, from a third stream (fencing.go). The
// machines mode (MachinesScenario, -protosim.machines) adds Machines
// beneath the nodes and a machine controller, from a fifth stream
// (machines.go): Machines deleted (remediated, scaled down), replaced and
// failed; the coordinator reads them and holds nodeward's pre-drain hook
// on a node's Machine before its grant, as the controller does. Its
// checks: the machine controller never drains a node under an unfinished
// grant, the hook never outlives the update by more than hookIdleEvents,
// and a grant counts the Machines down the coordinator knew of.
//
// The model explores interleavings; behaviour is proven on the real API
// server by the other test packages.
package protosim

import (
	"fmt"
	"math/rand/v2"
	"slices"
	"strconv"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"

	"github.com/nodeward/nodeward/api/v1alpha1"
)

// World is the model: the API server's objects, the hosts, the agents and
// the coordinator, and the record of violations.
type World struct {
	rng *rand.Rand
	// ext is the second stream, drawn only in extended mode (ext != nil):
	// every draw of the extended faults and pool features comes from it,
	// so that a classic schedule's draws from rng are the same as before
	// the extended mode existed and the corpus replays what it found.
	ext *rand.Rand
	// fence is the third stream, drawn only in fenced mode (fence !=
	// nil): the leader pauses and resumes (fencing.go). termCount is the
	// leader Lease's transitions and termValue its current term as a grant
	// carries it (the annotation's value), paused the leader stopped after
	// a pass's plan, if any.
	fence *rand.Rand
	// kubelet is the fourth stream, drawn only in fenced mode: whether a
	// registered Node's kubelet reports Ready a turn before the machine's
	// agent reports on it (agentTurn), as a kubelet does before the
	// DaemonSet's pod starts.
	kubelet *rand.Rand
	// mach is the machines mode's model (machines.go; nil outside it),
	// with the fifth stream.
	mach      *machineWorld
	termCount int32
	termValue string
	paused    *pausedLeader
	now       time.Time
	rv        int
	uids      int

	nodes map[string]*corev1.Node
	names []string // creation order
	pools map[string]*v1alpha1.UpdatePool
	// agentSeen is when each agent last renewed its Lease.
	agentSeen map[string]time.Time

	hosts  map[string]*host
	agents map[string]*agent
	coord  *coordinatorModel

	// registering are re-created Nodes whose kubelet has not reported
	// Ready yet.
	registering   map[string]bool
	pdbBlocked    map[string]bool
	adminCordoned map[string]bool
	// drained records, per node, the Node object whose drain finished.
	drained map[string]types.UID

	apiFailRate float64
	// x is the extended mode's model (nil in classic mode).
	x *extWorld
	// healed: the fault phase is over.
	healed   bool
	trace    []string
	traceLen int
	// afterViolation counts the trace lines after the first violation.
	afterViolation int
	violations     []string
}

// leaseDuration is how long an agent's Lease lasts without renewal.
const leaseDuration = time.Duration(v1alpha1.AgentLeaseDurationSeconds) * time.Second

func newWorld(seed uint64, extended bool) *World {
	w := &World{
		rng: rand.New(rand.NewPCG(seed, seed^0x9e3779b97f4a7c15)), traceLen: 120,
		now:       time.Date(2026, 11, 23, 12, 0, 0, 0, time.UTC),
		nodes:     map[string]*corev1.Node{},
		pools:     map[string]*v1alpha1.UpdatePool{},
		agentSeen: map[string]time.Time{},
		hosts:     map[string]*host{}, agents: map[string]*agent{},
		pdbBlocked: map[string]bool{}, registering: map[string]bool{}, adminCordoned: map[string]bool{}, drained: map[string]types.UID{},
	}
	if extended {
		w.ext = rand.New(rand.NewPCG(seed^0xda942042e4dd58b5, seed+0x2545f4914f6cdd1d))
		w.x = newExtWorld()
	}
	return w
}

func (w *World) clock() time.Time { return w.now }

func (w *World) apiFails() bool { return w.apiFailRate > 0 && w.rng.Float64() < w.apiFailRate }

func (w *World) bump(n *corev1.Node) {
	w.rv++
	n.ResourceVersion = strconv.Itoa(w.rv)
}

// bumpPool gives p a new resourceVersion, from the same counter as the
// Nodes' (an API server's resourceVersions are cluster-wide).
func (w *World) bumpPool(p *v1alpha1.UpdatePool) {
	w.rv++
	p.ResourceVersion = strconv.Itoa(w.rv)
}

func (w *World) logf(format string, args ...any) {
	if w.afterViolation > 20 {
		return // keep the trace that led to the first violation
	}
	if len(w.violations) > 0 {
		w.afterViolation++
	}
	line := fmt.Sprintf("%s ", w.now.Format("15:04:05")) + fmt.Sprintf(format, args...)
	w.trace = append(w.trace, line)
	if keep := w.traceLen; len(w.trace) > keep {
		w.trace = w.trace[len(w.trace)-keep:]
	}
}

func (w *World) violate(format string, args ...any) {
	msg := fmt.Sprintf(format, args...)
	w.logf("VIOLATION %s", msg)
	w.violations = append(w.violations, msg)
}

// addNode creates a Ready Node with labels, a host booted into os and an
// agent started on it.
func (w *World) addNode(name string, labels map[string]string, os string) {
	w.nodes[name] = w.newNodeObject(name, labels, corev1.ConditionTrue)
	if !slices.Contains(w.names, name) {
		w.names = append(w.names, name)
	}
	if _, ok := w.hosts[name]; !ok {
		w.hosts[name] = newHost(os)
		w.agents[name] = &agent{w: w, name: name, store: &memStore{}}
		w.agents[name].start()
	}
	w.agentSeen[name] = w.now
}

// newNodeObject is a Node as a kubelet registers it: a new UID, labels,
// no annotations, Ready as given.
func (w *World) newNodeObject(name string, labels map[string]string, ready corev1.ConditionStatus) *corev1.Node {
	w.uids++
	n := &corev1.Node{
		ObjectMeta: metav1.ObjectMeta{Name: name, UID: types.UID(fmt.Sprintf("uid-%d", w.uids)),
			Labels: labels, Annotations: map[string]string{}, CreationTimestamp: metav1.NewTime(w.now)},
		Status: corev1.NodeStatus{Conditions: []corev1.NodeCondition{{Type: corev1.NodeReady, Status: ready}}},
	}
	w.bump(n)
	return n
}

// patchAnnotations is a JSON merge patch of annotations (nil removes).
func (w *World) patchAnnotations(node string, set map[string]*string) error {
	n, ok := w.nodes[node]
	if !ok {
		return fmt.Errorf("node %s not found", node)
	}
	for k, v := range set {
		if v == nil {
			delete(n.Annotations, k)
		} else {
			n.Annotations[k] = *v
		}
	}
	w.bump(n)
	return nil
}

// leaseOK reports whether node's agent renewed its Lease recently.
func (w *World) leaseOK(node string) bool {
	seen, ok := w.agentSeen[node]
	return ok && w.now.Before(seen.Add(leaseDuration))
}
