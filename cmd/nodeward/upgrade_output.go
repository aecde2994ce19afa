package main

import (
	"fmt"
	"io"
	"slices"
	"strings"
	"text/tabwriter"

	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/nodeward/nodeward/api/v1alpha1"
	"github.com/nodeward/nodeward/updategraph"
)

// This file lays out `nodeward upgrade` as `oc adm upgrade` lays out a
// ClusterVersion, so that an OpenShift operator reads it without a guide:
// the version, a condition block when the updates could not be retrieved,
// Upstream and Channel, "Recommended updates:" as a VERSION / IMAGE table,
// and the not-recommended ones as "Version: / Image: / Recommended: /
// Reason: / Message:" blocks, with the same sentences when there are none.

// notEvaluated stands for the Recommended condition of a conditional
// update the coordinator has not evaluated yet: fail closed, it is not
// recommended.
func notEvaluated() metav1.Condition {
	return metav1.Condition{Type: v1alpha1.UpdateRecommended, Status: metav1.ConditionUnknown,
		Reason: "NotEvaluated", Message: "the coordinator has not evaluated the update's risks yet"}
}

// retrievedCondition is the pool's RetrievedUpdates condition; Unknown
// when the coordinator has not written one yet.
func retrievedCondition(p *v1alpha1.UpdatePool) metav1.Condition {
	if c := meta.FindStatusCondition(p.Status.Conditions, v1alpha1.PoolRetrievedUpdates); c != nil {
		return *c
	}
	return metav1.Condition{Type: v1alpha1.PoolRetrievedUpdates, Status: metav1.ConditionUnknown,
		Reason: "NotReported", Message: "the coordinator has not reported reading the pool's update source yet"}
}

// recommendedCondition is u's Recommended condition, notEvaluated when it
// has none.
func recommendedCondition(u v1alpha1.ConditionalUpdate) metav1.Condition {
	if c := meta.FindStatusCondition(u.Conditions, v1alpha1.UpdateRecommended); c != nil {
		return *c
	}
	return notEvaluated()
}

func isRecommended(u v1alpha1.ConditionalUpdate) bool {
	return recommendedCondition(u).Status == metav1.ConditionTrue
}

// poolUpdates is the pool's status.updates, empty when the coordinator has
// written none.
func poolUpdates(p *v1alpha1.UpdatePool) v1alpha1.UpdatesStatus {
	if p.Status.Updates == nil {
		return v1alpha1.UpdatesStatus{}
	}
	return *p.Status.Updates
}

// recommendedReleases are the updates an operator may take without
// accepting a risk: the available ones and the conditional ones whose
// risks do not apply (the cluster version operator lists those among its
// available updates too), newest first, each version once.
func recommendedReleases(u v1alpha1.UpdatesStatus) []v1alpha1.UpdateRelease {
	out := slices.Clone(u.Available)
	for _, c := range u.Conditional {
		if isRecommended(c) && !slices.ContainsFunc(out, func(r v1alpha1.UpdateRelease) bool { return r.Version == c.Release.Version }) {
			out = append(out, c.Release)
		}
	}
	slices.SortStableFunc(out, func(a, b v1alpha1.UpdateRelease) int { return updategraph.CompareVersions(b.Version, a.Version) })
	return out
}

// notRecommended are the conditional updates whose Recommended condition
// is not True, newest first.
func notRecommended(u v1alpha1.UpdatesStatus) []v1alpha1.ConditionalUpdate {
	var out []v1alpha1.ConditionalUpdate
	for _, c := range u.Conditional {
		if !isRecommended(c) {
			out = append(out, c)
		}
	}
	slices.SortStableFunc(out, func(a, b v1alpha1.ConditionalUpdate) int {
		return updategraph.CompareVersions(b.Release.Version, a.Release.Version)
	})
	return out
}

// printUpgrades writes what pool p's update source offers; p has one.
func printUpgrades(out io.Writer, p *v1alpha1.UpdatePool, includeNotRecommended bool) error {
	u, src := poolUpdates(p), p.Spec.UpdateSource
	fmt.Fprintf(out, "Pool %s version is %s\n\n", p.Name, currentVersion(p))
	if retrieved := retrievedCondition(p); retrieved.Status != metav1.ConditionTrue {
		fmt.Fprintf(out, "%s=%s\n\n  Reason: %s\n  Message: %s\n\n", retrieved.Type, retrieved.Status, retrieved.Reason, indent(retrieved.Message))
	}
	fmt.Fprintf(out, "Upstream: %s\nChannel: %s\n", src.URL, src.Channel)
	if len(src.AcceptedRisks) > 0 {
		fmt.Fprintf(out, "Accepted risks: %s\n", strings.Join(src.AcceptedRisks, ", "))
	}
	if err := printRecommended(out, recommendedReleases(u)); err != nil {
		return err
	}
	risky := notRecommended(u)
	switch {
	case includeNotRecommended && len(risky) > 0:
		fmt.Fprintf(out, "\nSupported but not recommended updates:\n")
		for _, c := range risky {
			printNotRecommended(out, c, src.AcceptedRisks)
		}
	case includeNotRecommended:
		fmt.Fprintf(out, "\nNo updates which are not recommended based on the pool's risks are available.\n")
	case len(risky) > 0:
		fmt.Fprintf(out, "\nAdditional updates which are not recommended based on the pool's risks are available, to view those re-run the command with --include-not-recommended.\n")
	}
	return nil
}

// currentVersion is the release the pool's nodes run, as the graph knows
// it, or why it is unknown.
func currentVersion(p *v1alpha1.UpdatePool) string {
	switch u := p.Status.Updates; {
	case u == nil:
		return "unknown (the coordinator has not listed the pool's updates yet)"
	case u.Current == nil:
		return "unknown (the image its nodes run is not in the update graph)"
	default:
		return u.Current.Version
	}
}

// printRecommended writes the VERSION / IMAGE table, with oc's cell
// widths, or oc's sentence when there is nothing to take.
func printRecommended(out io.Writer, releases []v1alpha1.UpdateRelease) error {
	if len(releases) == 0 {
		fmt.Fprintf(out, "\nNo updates available. You may still set the pool's spec.osImage by hand or wait for new updates to be available.\n")
		return nil
	}
	fmt.Fprintf(out, "\nRecommended updates:\n\n")
	w := tabwriter.NewWriter(out, 14, 2, 1, ' ', 0)
	fmt.Fprintf(w, "  VERSION\tIMAGE\n")
	for _, r := range releases {
		fmt.Fprintf(w, "  %s\t%s\n", r.Version, r.Image)
	}
	if err := w.Flush(); err != nil {
		return fmt.Errorf("write the recommended updates: %w", err)
	}
	return nil
}

// printNotRecommended writes one not-recommended update as oc does, then
// its risks with their URLs, marking those the pool already accepted.
func printNotRecommended(out io.Writer, u v1alpha1.ConditionalUpdate, accepted []string) {
	c := recommendedCondition(u)
	fmt.Fprintf(out, "\n  Version: %s\n  Image: %s\n", u.Release.Version, u.Release.Image)
	fmt.Fprintf(out, "  Recommended: %s\n  Reason: %s\n  Message: %s\n", c.Status, c.Reason, indent(strings.TrimSpace(c.Message)))
	if len(u.Risks) == 0 {
		return
	}
	fmt.Fprintf(out, "  Risks:\n")
	for _, r := range u.Risks {
		name := r.Name
		if slices.Contains(accepted, r.Name) {
			name += " (accepted)"
		}
		fmt.Fprintf(out, "    %s\n", riskLine(v1alpha1.UpdateRisk{Name: name, Message: r.Message, URL: r.URL}))
	}
}

// riskLine is "NAME: MESSAGE URL", the parts that are there.
func riskLine(r v1alpha1.UpdateRisk) string {
	s := r.Name
	if r.Message != "" {
		s += ": " + strings.ReplaceAll(strings.TrimSpace(r.Message), "\n", " ")
	}
	if r.URL != "" {
		s += " " + r.URL
	}
	return s
}

// indent continues a multi-line message under its label, as oc does.
func indent(msg string) string { return strings.ReplaceAll(msg, "\n", "\n  ") }
