package coordinator

import (
	"context"
	"fmt"
	"slices"
	"strconv"
	"strings"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/nodeward/nodeward/api/v1alpha1"
	"github.com/nodeward/nodeward/updategraph"
	"github.com/nodeward/nodeward/updaterisk"
)

// RiskEvaluator decides whether a pool's conditional updates are
// recommended: it evaluates their risks against the cluster (package
// updaterisk, with the cluster version operator's semantics and cache:
// PrometheusRisks) and returns each candidate's Recommended condition, in
// order (True NotExposedToRisks, False naming the risk, Unknown
// EvaluationFailed). All of a pool's candidates come in one call, so that
// a risk they share is evaluated once. It may block on a query.
type RiskEvaluator interface {
	Recommend(ctx context.Context, pool *v1alpha1.UpdatePool, candidates []updaterisk.Candidate) []metav1.Condition
}

// Reasons of RetrievedUpdates besides the FetchError's.
const (
	reasonRetrieving      = "Retrieving"
	reasonAsExpected      = "AsExpected"
	reasonVersionNotFound = "VersionNotFound"
	reasonEvaluationFail  = "EvaluationFailed"
)

// updateOffer is what a pool's update source offers it in one pass: its
// status.updates and RetrievedUpdates condition, and the hop policy
// Automatic takes once the pool is settled (nil: none).
type updateOffer struct {
	status    *v1alpha1.UpdatesStatus
	retrieved metav1.Condition
	next      *v1alpha1.UpdateRelease
}

// offerUpdates reads the pool's update source and lists its next hops. It
// fails closed: while the graph cannot be fetched or read, or the pool's
// release is not in it, the last good list is kept, the condition says
// why, and there is no next hop.
func (c *Controller) offerUpdates(ctx context.Context, pool *v1alpha1.UpdatePool, nodes []nodeView, now time.Time) *updateOffer {
	us := pool.Spec.UpdateSource
	if us == nil {
		return nil
	}
	kept := keptUpdates(pool)
	read := c.sources.read(graphSource(us))
	switch {
	case read.pending:
		return &updateOffer{status: kept, retrieved: retrievedCondition(pool, metav1.ConditionUnknown, reasonRetrieving,
			"the update graph is being fetched")}
	case read.err != nil:
		return &updateOffer{status: kept, retrieved: retrievedCondition(pool, metav1.ConditionFalse, read.reason,
			read.err.Error()+"; the last good list is kept and no target changes")}
	}
	policy, err := graphPolicy(us, nodes, kept, now)
	if err != nil {
		return &updateOffer{status: kept, retrieved: retrievedCondition(pool, metav1.ConditionFalse, updategraph.ReasonInvalidSource, err.Error())}
	}
	hops, err := updategraph.NextHops(read.last.Graph, poolRunning(pool, nodes), policy)
	if err != nil {
		at := metav1.NewTime(read.last.FetchedAt).Rfc3339Copy()
		return &updateOffer{status: &v1alpha1.UpdatesStatus{RetrievedAt: &at, RolledBack: policy.Denied},
			retrieved: retrievedCondition(pool, metav1.ConditionFalse, reasonVersionNotFound, err.Error()+"; no target changes")}
	}
	return c.offerHops(ctx, pool, hops, read.last.FetchedAt, policy.Denied)
}

// offerHops writes the hops as the status lists them, with each
// conditional candidate's Recommended condition, and picks the newest
// recommended candidate as the next hop.
func (c *Controller) offerHops(ctx context.Context, pool *v1alpha1.UpdatePool, hops updategraph.Hops, fetchedAt time.Time, denied []string) *updateOffer {
	current := releaseOf(hops.Current)
	at := metav1.NewTime(fetchedAt).Rfc3339Copy() // as the API server keeps it: a pass that changes nothing writes nothing
	st := &v1alpha1.UpdatesStatus{Current: &current, RetrievedAt: &at, RolledBack: denied}
	offer := &updateOffer{status: st}
	recommended := c.recommended(ctx, pool, hops.Candidates)
	for i, cand := range hops.Candidates { // newest first
		rel := releaseOf(cand.Release)
		if cand.Kind == updategraph.Unconditional {
			st.Available = append(st.Available, rel)
		} else {
			st.Conditional = append(st.Conditional, v1alpha1.ConditionalUpdate{Release: rel, Risks: risksOf(cand.Risks),
				Conditions: []metav1.Condition{recommended[i]}})
		}
		if automaticMayTake(cand, recommended[i]) && offer.next == nil && pinned(rel.Image) {
			next := rel
			offer.next = &next
		}
	}
	offer.retrieved = retrievedCondition(pool, metav1.ConditionTrue, reasonAsExpected, hopsMessage(hops, len(st.Available), len(st.Conditional)))
	return offer
}

// automaticMayTake says whether policy Automatic may take cand: an
// unconditional hop, or a conditional one recommended because the cluster
// is exposed to none of its risks. Not one recommended only because an
// operator accepted its risks: acceptedRisks were accepted for an update
// an operator chose (nodeward upgrade --to), not for any later one that
// shares a risk.
func automaticMayTake(cand updategraph.Candidate, recommended metav1.Condition) bool {
	if cand.Kind == updategraph.Unconditional {
		return true
	}
	return recommended.Status == metav1.ConditionTrue && recommended.Reason != updaterisk.ReasonAccepted
}

// recommended is each conditional candidate's Recommended condition, by
// its index among all candidates, as the RiskEvaluator says.
func (c *Controller) recommended(ctx context.Context, pool *v1alpha1.UpdatePool, candidates []updategraph.Candidate) map[int]metav1.Condition {
	var asked []updaterisk.Candidate
	var at []int
	for i, cand := range candidates {
		if cand.Kind != updategraph.Unconditional {
			asked = append(asked, updaterisk.Candidate{Version: cand.Release.Version, Risks: cand.Risks})
			at = append(at, i)
		}
	}
	if len(asked) == 0 {
		return nil
	}
	conds := c.opts.Risks.Recommend(ctx, pool, asked)
	out := make(map[int]metav1.Condition, len(at))
	for k, i := range at {
		cond := conds[k]
		cond.Type = v1alpha1.UpdateRecommended
		cond.ObservedGeneration = pool.Generation
		cond.LastTransitionTime = transitionTime(pool, asked[k].Version, cond)
		out[i] = cond
	}
	return out
}

// transitionTime keeps the time a conditional update's Recommended took
// its status, as meta.SetStatusCondition would, so that a pass that
// changes nothing writes nothing.
func transitionTime(pool *v1alpha1.UpdatePool, version string, cond metav1.Condition) metav1.Time {
	if u := pool.Status.Updates; u != nil {
		for _, prev := range u.Conditional {
			for _, pc := range prev.Conditions {
				if prev.Release.Version == version && pc.Type == v1alpha1.UpdateRecommended && pc.Status == cond.Status {
					return pc.LastTransitionTime
				}
			}
		}
	}
	if !cond.LastTransitionTime.IsZero() {
		return cond.LastTransitionTime.Rfc3339Copy()
	}
	return metav1.Now().Rfc3339Copy()
}

// keptUpdates is the pool's last published list, for when no graph can be
// read now. A shallow copy: nothing here writes into the cache's lists.
func keptUpdates(pool *v1alpha1.UpdatePool) *v1alpha1.UpdatesStatus {
	if pool.Status.Updates == nil {
		return nil
	}
	kept := *pool.Status.Updates
	return &kept
}

func retrievedCondition(pool *v1alpha1.UpdatePool, status metav1.ConditionStatus, reason, message string) metav1.Condition {
	return metav1.Condition{Type: v1alpha1.PoolRetrievedUpdates, Status: status, Reason: reason, Message: message,
		ObservedGeneration: pool.Generation}
}

// hopsMessage sums up the hops, naming the targets refused and why (a
// barrier first, a rollout not admitting the pool yet, a release that
// rolled back).
func hopsMessage(hops updategraph.Hops, available, conditional int) string {
	msg := fmt.Sprintf("the pool runs %s: %d recommended, %d conditional updates", hops.Current.Version, available, conditional)
	var refused []string
	for _, x := range hops.Excluded {
		refused = append(refused, x.Message)
	}
	if len(refused) > 5 {
		refused = append(refused[:5], fmt.Sprintf("and %d more", len(refused)-5))
	}
	if len(refused) > 0 {
		msg += "; not offered: " + strings.Join(refused, "; ")
	}
	return msg
}

// graphSource is the updategraph.Source a pool's spec names, the
// architecture spelled as the dialect's service spells it.
func graphSource(us *v1alpha1.UpdateSource) updategraph.Source {
	return updategraph.Source{URL: us.URL, Dialect: updategraph.Dialect(us.Dialect), Channel: us.Channel,
		Arch: dialectArch(us.Dialect, us.Arch)}
}

// dialectArch maps the CRD's architecture names (Kubernetes' or the
// kernel's) to the dialect's: OpenShift's update service says amd64 and
// arm64, Fedora CoreOS's x86_64 and aarch64. Empty is amd64.
func dialectArch(d v1alpha1.UpdateGraphDialect, arch string) string {
	rows := []struct{ kube, kernel string }{{"amd64", "x86_64"}, {"arm64", "aarch64"}}
	if arch == "" {
		arch = "amd64"
	}
	for _, r := range rows {
		if arch == r.kube || arch == r.kernel {
			if d == v1alpha1.FedoraCoreOSGraph {
				return r.kernel
			}
			return r.kube
		}
	}
	return arch
}

// graphPolicy is what NextHops decides with beyond the graph: the pool's
// wariness, the time, and the releases denied because they rolled back or
// failed on a node of the pool, now or before (kept in status).
func graphPolicy(us *v1alpha1.UpdateSource, nodes []nodeView, kept *v1alpha1.UpdatesStatus, now time.Time) (updategraph.Policy, error) {
	wariness := 0.5
	if us.Wariness != "" {
		w, err := strconv.ParseFloat(us.Wariness, 64)
		if err != nil {
			return updategraph.Policy{}, fmt.Errorf("updateSource.wariness %q: %w", us.Wariness, err)
		}
		wariness = w
	}
	var denied []string
	if kept != nil {
		denied = append(denied, kept.RolledBack...)
	}
	for _, n := range nodes {
		if n.selected && n.stateTgt != "" && (n.state == v1alpha1.StepRolledBack || n.state == v1alpha1.StepDegraded) {
			denied = append(denied, n.stateTgt)
		}
	}
	slices.Sort(denied)
	return updategraph.Policy{Denied: slices.Compact(denied), Wariness: wariness, Now: now}, nil
}

// poolRunning is what the pool runs as NextHops reads it: spec.osImage,
// matched by its digest (or as the OSTree checksum). A node Done on the
// pool's target reports that very image (the state target), so one entry
// stands for all of them, however many (NextHops matches each entry
// against the whole graph); before any node is Done, the target is what
// the pool is being moved to, and what its updates are listed from, as the
// cluster version operator lists them from its desired release.
func poolRunning(pool *v1alpha1.UpdatePool, nodes []nodeView) []updategraph.Running {
	if pool.Spec.OSImage == "" {
		return nil
	}
	done := 0
	for _, n := range nodes {
		if n.managed() && n.updated(pool.Spec.OSImage) {
			done++
		}
	}
	return []updategraph.Running{{Node: fmt.Sprintf("the pool's osImage (%d nodes Done on it)", done), ImageDigest: pool.Spec.OSImage}}
}

func releaseOf(r updategraph.Release) v1alpha1.UpdateRelease {
	return v1alpha1.UpdateRelease{Version: r.Version, Image: r.Payload, URL: r.Metadata["url"]}
}

func risksOf(risks []updategraph.Risk) []v1alpha1.UpdateRisk {
	out := make([]v1alpha1.UpdateRisk, len(risks))
	for i, r := range risks {
		out[i] = v1alpha1.UpdateRisk{Name: r.Name, Message: r.Message, URL: r.URL}
	}
	return out
}

// pinned reports whether a payload names one immutable OS: an image by
// digest or an OSTree commit checksum. Automatic never writes a tag.
func pinned(payload string) bool {
	if strings.Contains(payload, "@sha256:") {
		return true
	}
	if len(payload) != 64 {
		return false
	}
	return strings.Trim(payload, "0123456789abcdef") == ""
}

// namedSources are the sources the pools name now: updateSources drops
// the others.
func (c *Controller) namedSources() map[updategraph.Source]bool {
	named := map[updategraph.Source]bool{}
	for _, pool := range c.cachedPools() {
		if us := pool.Spec.UpdateSource; us != nil {
			named[graphSource(us)] = true
		}
	}
	return named
}
