package mco

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"sync"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/nodeward/nodeward/api/kube"
	v1alpha1 "github.com/nodeward/nodeward/api/v1alpha1"
	"github.com/nodeward/nodeward/daemon/update"
)

// The machine-config-daemon's node annotations and their values, as the
// MCO's node and drain controllers read and write them.
const (
	AnnotationCurrentConfig    = "machineconfiguration.openshift.io/currentConfig"
	AnnotationDesiredConfig    = "machineconfiguration.openshift.io/desiredConfig"
	AnnotationState            = "machineconfiguration.openshift.io/state"
	AnnotationReason           = "machineconfiguration.openshift.io/reason"
	AnnotationDesiredDrain     = "machineconfiguration.openshift.io/desiredDrain"
	AnnotationLastAppliedDrain = "machineconfiguration.openshift.io/lastAppliedDrain"
	AnnotationCurrentImage     = "machineconfiguration.openshift.io/currentImage"
	AnnotationDesiredImage     = "machineconfiguration.openshift.io/desiredImage"
	AnnotationTopology         = "machineconfiguration.openshift.io/controlPlaneTopology"

	StateDone           = "Done"
	StateWorking        = "Working"
	StateDegraded       = "Degraded"
	StateUnreconcilable = "Unreconcilable"

	// TopologySingleReplica is a single-node cluster: the update does not
	// drain (there is nowhere to move the pods).
	TopologySingleReplica = "SingleReplica"

	// maxReasonRunes bounds the reason annotation as the MCD does (the
	// error's first 2000 characters), far below the annotations' size limit.
	maxReasonRunes = 2000
)

// Protocol is the machine-config-daemon's side of the MCO protocol
// (--protocol=mco). The node controller grants a node by setting
// desiredConfig to a rendered MachineConfig's name: the update's target is
// that name (and desiredImage on a layered pool, see Target), and the
// grant lasts while desiredConfig differs from currentConfig. The agent
// reports state, reason and at Done currentConfig, and keeps the node's
// MachineConfigNode status, as the MCD does.
type Protocol struct {
	Client *kube.Client
	Node   string
	// Status writes the node's MachineConfigNode; nil writes none.
	Status *NodeStatus
	// Coexistence finds a machine-config-daemon on the node; nil skips
	// the check.
	Coexistence *Coexistence
	// Bootstrap is the new node's first-boot file; nil never bootstraps.
	Bootstrap *Bootstrap
	// Drift is told which config to watch for drift: the one the node is
	// Done on, none while it updates. nil watches nothing.
	Drift interface{ Watch(config string) }
	// DegradeAfter is how long a step may keep failing before the node
	// reports Degraded (the MCD degrades on the first failed sync; a
	// short grace keeps one API conflict from marking the pool); 30 s
	// when zero.
	DegradeAfter time.Duration
	// DrainDegradeAfter is how long a blocked drain waits before the node
	// reports Degraded, as the MCD's 1 h drain wait; 1 h when zero.
	DrainDegradeAfter time.Duration
	// PolicyWait is how long a step waits for the node disruption
	// policies (ErrPoliciesNotReady) before the node reports Degraded;
	// the daemon's PolicyWait when zero.
	PolicyWait time.Duration
	Now        func() time.Time

	mu sync.Mutex
	// failing is Degraded or Unreconcilable once reported: the MCD keeps
	// it through its retries until an update succeeds (sticky), and so
	// does nodeward; "" when not failing. loaded tells whether it was
	// read back from the node after a restart.
	failing, failingReason string
	loaded                 bool
	// drifted is the drift reason reported Degraded (Drifted), until the
	// drift is gone or an update succeeds; last is the machine state last
	// reported, for the MachineConfigNode's status then.
	drifted string
	last    update.State
}

// Target is the update machine's target for a rendered config: its name,
// followed by the image of a layered pool (desiredImage) when there is one.
func Target(config, image string) string {
	if image == "" {
		return config
	}
	return config + " " + image
}

// SplitTarget is the inverse of Target.
func SplitTarget(target string) (config, image string) {
	config, image, _ = strings.Cut(target, " ")
	return config, image
}

// Desired implements update.Protocol.
func (p *Protocol) Desired(ctx context.Context, node *corev1.Node) (update.Desired, error) {
	if node.Annotations[AnnotationCurrentConfig] == "" && p.Bootstrap != nil {
		var err error
		if node, err = p.bootstrap(ctx); err != nil {
			return update.Desired{}, err
		}
	}
	a := node.Annotations
	desired := a[AnnotationDesiredConfig]
	if desired == "" {
		return update.Desired{}, nil
	}
	target := Target(desired, a[AnnotationDesiredImage])
	d := update.Desired{Target: target, GrantTarget: target, SkipDrain: a[AnnotationTopology] == TopologySingleReplica}
	if desired != a[AnnotationCurrentConfig] || a[AnnotationDesiredImage] != a[AnnotationCurrentImage] {
		d.Grant = target
	} else if grant, err := p.firstPivot(target); err != nil || grant {
		d.Grant = target
		if err != nil {
			return update.Desired{}, err
		}
	}
	if p.Coexistence != nil && d.Grant != "" {
		if why, err := p.Coexistence.Check(ctx, desired); err != nil || why != "" {
			if why != "" {
				p.refuse(ctx, why)
				err = fmt.Errorf("%s", why)
			}
			return update.Desired{}, err
		}
	}
	return d, nil
}

// bootstrap gives a new node, one without currentConfig, its first
// annotations from the first-boot file, as the daemon does on its first
// start. Without the file, or with one that cannot be read, the node
// reports Degraded saying why and nothing else is written.
func (p *Protocol) bootstrap(ctx context.Context) (*corev1.Node, error) {
	initial, err := p.Bootstrap.Annotations()
	if err != nil {
		p.refuse(ctx, err.Error())
		return nil, err
	}
	set := make(map[string]*string, len(initial)+1)
	for k, v := range initial {
		set[k] = ptr(v)
	}
	// Working, not the file's Done: the node controller counts a node
	// whose state is Done on its desired config as updated and available,
	// and this one has not checked that it runs the config yet (it may
	// have booted another OS and must pivot first).
	set[AnnotationState] = ptr(StateWorking)
	node, err := p.patch(ctx, set)
	if err != nil {
		return nil, fmt.Errorf("set the initial node annotations from %s: %w", NodeAnnotationsFile, err)
	}
	return node, nil
}

// firstPivot tells whether a node still bootstrapping (its first-boot file
// present) may move to its own current config without the node
// controller's grant: the daemon's first-boot pivot, which boots the OS of
// the first config when the node came up on another. Only the config the
// node already claims is ever targeted this way, never a new one.
func (p *Protocol) firstPivot(target string) (bool, error) {
	if p.Bootstrap == nil || target == "" {
		return false, nil
	}
	return p.Bootstrap.Active()
}

// refuse reports Degraded with why, once per distinct reason.
func (p *Protocol) refuse(ctx context.Context, why string) {
	_, _, _ = p.degrade(ctx, why)
}

// degrade reports Degraded with why unless that is what the node says
// already; it returns the node as written and whether it wrote.
func (p *Protocol) degrade(ctx context.Context, why string) (*corev1.Node, bool, error) {
	p.mu.Lock()
	same := p.failing == StateDegraded && p.failingReason == why
	p.failing, p.failingReason, p.loaded = StateDegraded, why, true
	p.mu.Unlock()
	if same {
		return nil, false, nil
	}
	node, err := p.patch(ctx, map[string]*string{AnnotationState: ptr(StateDegraded), AnnotationReason: ptr(bound(why))})
	return node, err == nil, err
}

// Report implements update.Protocol: state and reason, currentConfig once
// the desired config is what runs, then the MachineConfigNode's status.
func (p *Protocol) Report(ctx context.Context, st update.State) error {
	if err := p.loadFailing(ctx); err != nil {
		return err
	}
	state, reason := p.stateFor(st)
	set := map[string]*string{AnnotationState: &state, AnnotationReason: ptr(bound(reason))}
	if state == StateDone && st.Target != "" {
		if done, err := p.claimDone(ctx, st, set); err != nil {
			return err
		} else if !done {
			state = StateWorking // the controller moved on: not Done for it
			set[AnnotationState] = &state
		}
	}
	if state == StateDone {
		if err := p.done(st); err != nil {
			return err
		}
		if why := p.drift(); why != "" {
			// Done on a config whose files drifted: Degraded until they
			// are put back (DriftGone).
			state, reason = StateDegraded, why
			set[AnnotationState], set[AnnotationReason] = &state, ptr(bound(why))
		}
	}
	node, err := p.patch(ctx, set)
	if err != nil {
		return err
	}
	p.watchDrift(st, state)
	if p.Status != nil {
		return p.Status.Write(ctx, node, st, state, reason)
	}
	return nil
}

// done ends a failure when the node is Done, and a new node's bootstrap.
func (p *Protocol) done(st update.State) error {
	p.mu.Lock()
	if p.drifted == "" {
		p.failing, p.failingReason, p.loaded = "", "", true
	}
	p.mu.Unlock()
	if p.Bootstrap != nil && st.Target != "" {
		return p.Bootstrap.Finish()
	}
	return nil
}

// drift is the drift reported and not gone yet, "" when none.
func (p *Protocol) drift() string {
	p.mu.Lock()
	defer p.mu.Unlock()
	return p.drifted
}

// watchDrift has the config watched for drift while the node is Done on
// it, and nothing watched while it updates.
func (p *Protocol) watchDrift(st update.State, state string) {
	p.mu.Lock()
	p.last = st
	p.mu.Unlock()
	if p.Drift == nil {
		return
	}
	config := ""
	if state != StateWorking && mcdStepOf(st.Step).state == StateDone && st.Target != "" {
		config, _ = SplitTarget(st.Target)
	}
	if config == "" {
		// An update rewrites the files: a drift of the config it leaves
		// ends with it (the failure it reported stays until Done).
		p.mu.Lock()
		p.drifted = ""
		p.mu.Unlock()
	}
	p.Drift.Watch(config)
}

// Drifted reports the node Degraded for a config drift, with the drifted
// path's message, as the daemon does.
func (p *Protocol) Drifted(ctx context.Context, why string) error {
	p.mu.Lock()
	p.drifted = why
	st := p.last
	p.mu.Unlock()
	node, wrote, err := p.degrade(ctx, why)
	if err != nil || !wrote || p.Status == nil {
		return err
	}
	return p.Status.Write(ctx, node, st, StateDegraded, why)
}

// DriftGone clears a Degraded state that a config drift caused, once the
// drifted path is back as the config says: the node is Done again. A
// Degraded state for another reason stays.
func (p *Protocol) DriftGone(ctx context.Context) error {
	p.mu.Lock()
	ours := p.drifted != "" && p.failing == StateDegraded && p.failingReason == p.drifted
	p.drifted = ""
	st := p.last
	if ours {
		p.failing, p.failingReason = "", ""
	}
	p.mu.Unlock()
	if !ours {
		return nil
	}
	node, err := p.patch(ctx, map[string]*string{AnnotationState: ptr(StateDone), AnnotationReason: ptr("")})
	if err != nil || p.Status == nil {
		return err
	}
	return p.Status.Write(ctx, node, st, StateDone, "")
}

// claimDone adds currentConfig (and currentImage) to set when the target
// the machine finished is the node's desired config now, from a fresh
// read: the controller may have moved on while the agent finished, and
// the node never claims a config it does not run.
func (p *Protocol) claimDone(ctx context.Context, st update.State, set map[string]*string) (bool, error) {
	node, err := p.Client.Nodes().Get(ctx, p.Node, metav1.GetOptions{})
	if err != nil {
		return false, fmt.Errorf("get node %s: %w", p.Node, err)
	}
	desired, image := node.Annotations[AnnotationDesiredConfig], node.Annotations[AnnotationDesiredImage]
	if Target(desired, image) != st.Target {
		return false, nil
	}
	set[AnnotationCurrentConfig] = &desired
	set[AnnotationCurrentImage] = nil
	if image != "" {
		set[AnnotationCurrentImage] = &image
	}
	return true, nil
}

// stateFor maps the machine's step to the MCD's state (mcdSteps) and
// reason: a refused config is Unreconcilable and a rollback Degraded
// whatever the step, and a failure sticks until the step's state is Done.
func (p *Protocol) stateFor(st update.State) (string, string) {
	state := mcdStepOf(st.Step).state
	switch {
	case st.Refused:
		p.setFailing(StateUnreconcilable, st.Reason)
		return StateUnreconcilable, st.Reason
	case state == StateDegraded || st.RollingBack:
		p.setFailing(StateDegraded, st.Reason)
		return StateDegraded, st.Reason
	}
	p.mu.Lock()
	failing, why := p.failing, p.failingReason
	p.mu.Unlock()
	switch {
	case failing != "" && state != StateDone:
		return failing, why // sticky until an update succeeds
	case state == StateDone:
		return StateDone, ""
	}
	return StateWorking, st.Reason
}

// ReportError implements update.ErrorReporter: a step failing for longer
// than DegradeAfter, or a drain blocked for longer than DrainDegradeAfter,
// reports Degraded with the error, once per distinct reason.
func (p *Protocol) ReportError(ctx context.Context, st update.State, stepErr error, since time.Time) error {
	now := p.now()
	degradeAfter := orDefault(p.DegradeAfter, 30*time.Second)
	if errors.Is(stepErr, ErrPoliciesNotReady) {
		degradeAfter = orDefault(p.PolicyWait, PolicyWait) // the daemon's bound
	}
	var why string
	switch {
	case stepErr != nil && now.Sub(since) >= degradeAfter:
		why = fmt.Sprintf("%s: %v", st.Step, stepErr)
	case st.Step == v1alpha1.StepDraining && !st.DrainSince.IsZero() &&
		now.Sub(st.DrainSince) >= orDefault(p.DrainDegradeAfter, time.Hour):
		why = fmt.Sprintf("failed to drain node: %s after %s: %s", p.Node, orDefault(p.DrainDegradeAfter, time.Hour), st.Reason)
	default:
		return nil
	}
	node, wrote, err := p.degrade(ctx, why)
	if err != nil || !wrote || p.Status == nil {
		return err
	}
	return p.Status.Write(ctx, node, st, StateDegraded, why)
}

// loadFailing reads a Degraded or Unreconcilable state back from the node
// after a restart, so that it stays sticky.
func (p *Protocol) loadFailing(ctx context.Context) error {
	p.mu.Lock()
	loaded := p.loaded
	p.mu.Unlock()
	if loaded {
		return nil
	}
	node, err := p.Client.Nodes().Get(ctx, p.Node, metav1.GetOptions{})
	if err != nil {
		return fmt.Errorf("get node %s: %w", p.Node, err)
	}
	p.mu.Lock()
	defer p.mu.Unlock()
	if s := node.Annotations[AnnotationState]; !p.loaded && (s == StateDegraded || s == StateUnreconcilable) {
		p.failing, p.failingReason = s, node.Annotations[AnnotationReason]
	}
	p.loaded = true
	return nil
}

func (p *Protocol) setFailing(state, reason string) {
	p.mu.Lock()
	defer p.mu.Unlock()
	p.failing, p.failingReason, p.loaded = state, reason, true
}

// patch merges set into the node's annotations and returns the node.
func (p *Protocol) patch(ctx context.Context, set map[string]*string) (*corev1.Node, error) {
	node, err := update.PatchAnnotations(ctx, p.Client, p.Node, set)
	if err != nil {
		return nil, fmt.Errorf("report MCO state: %w", err)
	}
	return node, nil
}

func (p *Protocol) now() time.Time {
	if p.Now != nil {
		return p.Now()
	}
	return time.Now()
}

// bound cuts a reason to the MCD's limit.
func bound(reason string) string {
	if r := []rune(reason); len(r) > maxReasonRunes {
		return string(r[:maxReasonRunes])
	}
	return reason
}

func orDefault(d, def time.Duration) time.Duration {
	if d > 0 {
		return d
	}
	return def
}

func ptr(s string) *string { return &s }
