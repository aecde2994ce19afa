package update

import (
	"context"
	"errors"
	"fmt"
	"strconv"
	"time"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/nodeward/nodeward/api/kube"
	v1alpha1 "github.com/nodeward/nodeward/api/v1alpha1"
)

// AnnotationProtocol speaks the coordinator protocol through annotations on
// the agent's own Node.
type AnnotationProtocol struct {
	Client *kube.Client
	Node   string
	// Observe, when set, gets the Node each report's patch returned: the
	// agent's watch may deliver its own writes after the next step reads
	// the node, and a step that read the node from before its own cordon
	// took it for an admin's uncordon (the 100-node rollout did, once the
	// client's rate limit no longer spaced the steps).
	Observe func(*corev1.Node)
}

// Desired implements Protocol. A malformed value is an error naming the
// annotation and its value; the Desired returned beside it still carries
// every value that could be read, the bad ones at their safe defaults (no
// yield, no force, the agent's own drain timeout).
func (p *AnnotationProtocol) Desired(_ context.Context, node *corev1.Node) (Desired, error) {
	a := node.Annotations
	d := Desired{Target: a[v1alpha1.AnnotationTarget], Grant: a[v1alpha1.AnnotationGrant],
		GrantTarget: a[v1alpha1.AnnotationGrantTarget], GrantTerm: a[v1alpha1.AnnotationGrantTerm]}
	var errs []error
	parseBool := func(key string, into *bool) {
		v, ok := a[key]
		if !ok {
			return
		}
		b, err := strconv.ParseBool(v)
		if err != nil {
			errs = append(errs, fmt.Errorf("annotation %s=%q: want true or false", key, v))
			return
		}
		*into = b
	}
	parseBool(v1alpha1.AnnotationYieldOnDrainTimeout, &d.YieldOnDrainTimeout)
	parseBool(v1alpha1.AnnotationForceOnDrainTimeout, &d.ForceOnDrainTimeout)
	parseBool(v1alpha1.AnnotationReleaseAtDone, &d.ReleaseAtDone)
	if v, ok := a[v1alpha1.AnnotationDrainTimeout]; ok {
		t, err := time.ParseDuration(v)
		if err != nil || t <= 0 {
			errs = append(errs, fmt.Errorf("annotation %s=%q: want a positive duration such as 10m", v1alpha1.AnnotationDrainTimeout, v))
		} else {
			d.DrainTimeout = t
		}
	}
	return d, errors.Join(errs...)
}

// StaleTerm implements TermChecker with a quorum read of the leader Lease
// the grant's term names: a term it cannot parse, a Lease gone, or a Lease
// in another term (another holder, a later transition, a Lease created
// again) make the grant stale.
func (p *AnnotationProtocol) StaleTerm(ctx context.Context, want Desired) (string, error) {
	if want.GrantTerm == "" {
		return "", nil
	}
	term, err := v1alpha1.ParseLeaderTerm(want.GrantTerm)
	if err != nil {
		return fmt.Sprintf("grant %s: annotation %s: %v: a grant whose term cannot be checked is never used",
			want.Grant, v1alpha1.AnnotationGrantTerm, err), nil
	}
	namespace, name := term.LeaseNamespaceName()
	lease, err := p.Client.Leases(namespace).Get(ctx, name, metav1.GetOptions{})
	if apierrors.IsNotFound(err) {
		return fmt.Sprintf("grant %s was issued in term %d of leader Lease %s, which no longer exists: a deposed leader's grant is never used",
			want.Grant, term.Transitions, term.Lease), nil
	}
	if err != nil {
		return "", fmt.Errorf("read leader Lease %s to check the term of grant %s: %w", term.Lease, want.Grant, err)
	}
	if now := v1alpha1.TermOf(lease); now != term {
		return fmt.Sprintf("grant %s was issued in term %d of leader Lease %s (holder %s), which is now in term %d (holder %q): "+
			"a deposed leader's grant is never used", want.Grant, term.Transitions, term.Lease, term.Holder, now.Transitions, now.Holder), nil
	}
	return "", nil
}

// Report implements Protocol with one merge patch of the agent's keys.
func (p *AnnotationProtocol) Report(ctx context.Context, st State) error {
	node, err := PatchAnnotations(ctx, p.Client, p.Node, ReportAnnotations(st))
	if err == nil && p.Observe != nil {
		p.Observe(node)
	}
	return err
}

// ReportAnnotations are the agent's keys for st, as a merge patch: a nil
// value removes the key. The protocol simulator applies the same patch to
// its model of the API.
func ReportAnnotations(st State) map[string]*string {
	str := func(s string) *string {
		if s == "" {
			return nil
		}
		return &s
	}
	staged := ""
	if st.Step.ReportsStaged() {
		staged = st.Target
	}
	unavailable := ""
	if st.Step.Disrupting() && !st.UnavailableSince.IsZero() {
		unavailable = st.UnavailableSince.UTC().Format(time.RFC3339Nano)
	}
	set := map[string]*string{
		v1alpha1.AnnotationState:            str(string(st.Step)),
		v1alpha1.AnnotationStateTarget:      str(st.Target),
		v1alpha1.AnnotationStateGrant:       str(st.Grant),
		v1alpha1.AnnotationStaged:           str(staged),
		v1alpha1.AnnotationReason:           str(st.Reason),
		v1alpha1.AnnotationUnavailableSince: str(unavailable),
	}
	if st.Step == v1alpha1.StepDone && st.Grant != "" && st.ReleaseAtDone {
		// The grant is given back in the report that finishes it: the
		// coordinator then writes no release (#21). The admission policy
		// allows exactly this removal (manifests/base/admission-policy.yaml).
		for _, k := range v1alpha1.ReleaseKeys() {
			set[k] = nil
		}
	}
	return set
}
