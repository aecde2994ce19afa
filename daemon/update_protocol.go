package daemon

import (
	"context"
	"fmt"
	"strconv"
	"time"

	corev1 "k8s.io/api/core/v1"

	"github.com/nodeward/nodeward/api/kube"
	v1alpha1 "github.com/nodeward/nodeward/api/v1alpha1"
)

// AnnotationKeys names the node annotations of the agent's side of the
// protocol. The coordinator writes Target, Grant and the yield settings;
// the agent writes the rest.
type AnnotationKeys struct {
	Target       string // coordinator: the pool's OS target
	Grant        string // coordinator: present while a slot is granted; value identifies the grant
	YieldOnDrain string // coordinator: "true" to give the slot back after a blocked drain
	ForceOnDrain string // coordinator: "true" to force-delete what blocks a drain past its timeout
	DrainTimeout string // coordinator: Go duration bounding a blocked drain

	State        string // agent: the current Step
	StateTarget  string // agent: the target the state refers to
	StateGrant   string // agent: the grant the state refers to
	StagedTarget string // agent: the target that is staged (pre-staged before any slot)
	Reason       string // agent: why Degraded / Yielded / waiting
	Unavailable  string // agent: RFC 3339 time the node became unavailable for this update
}

// DefaultAnnotationKeys are the protocol's annotations (api/v1alpha1,
// docs/protocol.md).
func DefaultAnnotationKeys() AnnotationKeys {
	return AnnotationKeys{
		Target: v1alpha1.AnnotationTarget, Grant: v1alpha1.AnnotationGrant,
		YieldOnDrain: v1alpha1.AnnotationYieldOnDrainTimeout, ForceOnDrain: v1alpha1.AnnotationForceOnDrainTimeout,
		DrainTimeout: v1alpha1.AnnotationDrainTimeout,
		State:        v1alpha1.AnnotationState, StateTarget: v1alpha1.AnnotationStateTarget,
		StateGrant: v1alpha1.AnnotationStateGrant, StagedTarget: v1alpha1.AnnotationStaged,
		Reason: v1alpha1.AnnotationReason, Unavailable: v1alpha1.AnnotationUnavailableSince,
	}
}

// AnnotationProtocol speaks the coordinator protocol through annotations on
// the agent's own Node.
type AnnotationProtocol struct {
	Client *kube.Client
	Node   string
	Keys   AnnotationKeys
}

// Desired implements Protocol. A malformed value is an error naming the
// annotation and its value, and changes nothing.
func (p *AnnotationProtocol) Desired(node *corev1.Node) (Desired, error) {
	a := node.Annotations
	d := Desired{Target: a[p.Keys.Target], Grant: a[p.Keys.Grant]}
	if v, ok := a[p.Keys.YieldOnDrain]; ok {
		b, err := strconv.ParseBool(v)
		if err != nil {
			return Desired{}, fmt.Errorf("annotation %s=%q: want true or false", p.Keys.YieldOnDrain, v)
		}
		d.YieldOnDrainTimeout = b
	}
	if v, ok := a[p.Keys.ForceOnDrain]; ok && p.Keys.ForceOnDrain != "" {
		b, err := strconv.ParseBool(v)
		if err != nil {
			return Desired{}, fmt.Errorf("annotation %s=%q: want true or false", p.Keys.ForceOnDrain, v)
		}
		d.ForceOnDrainTimeout = b
	}
	if v, ok := a[p.Keys.DrainTimeout]; ok {
		t, err := time.ParseDuration(v)
		if err != nil || t <= 0 {
			return Desired{}, fmt.Errorf("annotation %s=%q: want a positive duration such as 10m", p.Keys.DrainTimeout, v)
		}
		d.DrainTimeout = t
	}
	return d, nil
}

// Report implements Protocol with one merge patch of the agent's keys.
func (p *AnnotationProtocol) Report(ctx context.Context, st State) error {
	str := func(s string) *string {
		if s == "" {
			return nil
		}
		return &s
	}
	staged := ""
	switch st.Step {
	case StepStaged, StepGranted, StepHooksPreDrain, StepCordoning, StepDraining, StepHooksPreReboot,
		StepFinalizing, StepYielding, StepYielded:
		staged = st.Target
	}
	unavailable := ""
	if st.Step.Unavailable() && !st.UnavailableSince.IsZero() {
		unavailable = st.UnavailableSince.UTC().Format(time.RFC3339Nano)
	}
	return patchAnnotations(ctx, p.Client, p.Node, map[string]*string{
		p.Keys.State:        str(string(st.Step)),
		p.Keys.StateTarget:  str(st.Target),
		p.Keys.StateGrant:   str(st.Grant),
		p.Keys.StagedTarget: str(staged),
		p.Keys.Reason:       str(st.Reason),
		p.Keys.Unavailable:  str(unavailable),
	})
}
