package main

import (
	"errors"
	"fmt"
	"slices"
	"strings"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/nodeward/nodeward/api/v1alpha1"
	"github.com/nodeward/nodeward/osupdate"
)

// This file decides what `nodeward upgrade --to VERSION` changes, from the
// pool as read: pure, so that every refusal is made before anything is
// written.

// maxVersion bounds a --to VERSION: release versions are short.
const maxVersion = 128

// upgradeChoice is the change --to makes to one pool: spec.osImage to the
// release's pinned image and, for a not-recommended release, its risks
// added to spec.updateSource.acceptedRisks, in one patch guarded by the
// resourceVersion the choice was made at.
type upgradeChoice struct {
	pool            string
	resourceVersion string
	release         v1alpha1.UpdateRelease
	// from is spec.osImage before.
	from string
	// accepted are the risks of a not-recommended release, accepted by
	// --allow-not-recommended; none for a recommended one.
	accepted []v1alpha1.UpdateRisk
	// acceptedRisks is spec.updateSource.acceptedRisks after: the pool's
	// own, then the names of accepted not already there.
	acceptedRisks []string
	// added counts those names.
	added int
}

// validVersion refuses what cannot be a release version, before the pool
// is read: a version is letters, digits and . + - _ (4.18.3,
// 41.20250117.3.0, 4.19.0-rc.1).
func validVersion(v string) error {
	switch {
	case v == "":
		return errors.New("--to: empty version")
	case len(v) > maxVersion:
		return fmt.Errorf("--to: version is %d bytes; at most %d", len(v), maxVersion)
	case strings.Trim(v, "abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ0123456789.+-_") != "":
		return fmt.Errorf("--to %q: malformed version (want letters, digits and . + - _, e.g. 4.18.3 or 41.20250117.3.0)", v)
	case strings.Trim(v[:1], "0123456789abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ") != "":
		return fmt.Errorf("--to %q: malformed version (it starts with %q)", v, v[:1])
	}
	return nil
}

// requireSource refuses a pool without an update source: it has no
// updates to list or take.
func requireSource(p *v1alpha1.UpdatePool) error {
	if p.Spec.UpdateSource == nil {
		return fmt.Errorf("UpdatePool %s has no spec.updateSource: it lists no updates; give it one (docs/updates.md) or set spec.osImage by hand", p.Name)
	}
	return nil
}

// chooseUpgrade is the change to move p to version, or why not.
func chooseUpgrade(p *v1alpha1.UpdatePool, version string, allowNotRecommended bool) (upgradeChoice, error) {
	if err := requireSource(p); err != nil {
		return upgradeChoice{}, err
	}
	c := upgradeChoice{pool: p.Name, resourceVersion: p.ResourceVersion, from: p.Spec.OSImage,
		acceptedRisks: slices.Clone(p.Spec.UpdateSource.AcceptedRisks)}
	u := poolUpdates(p)
	if i := slices.IndexFunc(recommendedReleases(u), func(r v1alpha1.UpdateRelease) bool { return r.Version == version }); i >= 0 {
		c.release = recommendedReleases(u)[i]
	} else if i := slices.IndexFunc(u.Conditional, func(r v1alpha1.ConditionalUpdate) bool { return r.Release.Version == version }); i >= 0 {
		risky := u.Conditional[i]
		if !allowNotRecommended {
			return upgradeChoice{}, notRecommendedError(p.Name, risky)
		}
		c.release, c.accepted = risky.Release, risky.Risks
	} else {
		return upgradeChoice{}, notAvailableError(p, version)
	}
	if err := requirePinned(c.release); err != nil {
		return upgradeChoice{}, fmt.Errorf("pool %s: %w", p.Name, err)
	}
	for _, r := range c.accepted {
		if !slices.Contains(c.acceptedRisks, r.Name) {
			c.acceptedRisks = append(c.acceptedRisks, r.Name)
			c.added++
		}
	}
	return c, nil
}

// requirePinned refuses a release whose image could change under the
// same name: a pool's target must name exact content, an image by digest
// or an OSTree commit checksum (Fedora CoreOS's checksum scheme).
func requirePinned(r v1alpha1.UpdateRelease) error {
	if r.Image == "" {
		return fmt.Errorf("release %s has no image in the pool's status.updates; refusing to target it", r.Version)
	}
	t, err := osupdate.Policy{}.ParseTarget(r.Image)
	if err != nil {
		return fmt.Errorf("release %s: image %q is not a valid target: %w", r.Version, r.Image, err)
	}
	if len(t.KernelArgs)+len(t.DeleteKernelArgs) > 0 {
		return fmt.Errorf("release %s: image %q is more than one image reference; refusing to target it", r.Version, r.Image)
	}
	if t.Digest == "" && t.Checksum == "" {
		return fmt.Errorf("release %s: image %q is not pinned to a digest (want REGISTRY/REPOSITORY@sha256:…); refusing a target that could change under its name", r.Version, r.Image)
	}
	return nil
}

// notRecommendedError names the risks of a not-recommended update and the
// flag that accepts them.
func notRecommendedError(pool string, u v1alpha1.ConditionalUpdate) error {
	c := recommendedCondition(u)
	var b strings.Builder
	fmt.Fprintf(&b, "%s is not a recommended update of pool %s (Recommended=%s, %s: %s)", u.Release.Version, pool,
		c.Status, c.Reason, strings.ReplaceAll(strings.TrimSpace(c.Message), "\n", " "))
	fmt.Fprintf(&b, "; its risks:")
	for _, r := range u.Risks {
		fmt.Fprintf(&b, "\n  %s", riskLine(r))
	}
	fmt.Fprintf(&b, "\nnothing changed; to accept these risks, re-run with --allow-not-recommended (they are recorded in spec.updateSource.acceptedRisks)")
	return errors.New(b.String())
}

// notAvailableError lists what the pool may go to instead.
func notAvailableError(p *v1alpha1.UpdatePool, version string) error {
	u := poolUpdates(p)
	var versions []string
	for _, r := range recommendedReleases(u) {
		versions = append(versions, r.Version)
	}
	msg := fmt.Sprintf("%s is not an available update of pool %s; available: %s", version, p.Name, listOrNone(versions))
	versions = nil
	for _, c := range notRecommended(u) {
		versions = append(versions, c.Release.Version)
	}
	if len(versions) > 0 {
		msg += "; not recommended (need --allow-not-recommended): " + strings.Join(versions, ", ")
	}
	if p.Status.Updates == nil {
		msg += " (the coordinator has not listed the pool's updates yet: status.updates is empty)"
	}
	return errors.New(msg + "; nothing changed")
}

func listOrNone(list []string) string {
	if len(list) == 0 {
		return "none"
	}
	return strings.Join(list, ", ")
}

// changes says whether the choice changes the pool: a pool already on the
// release, with its risks already accepted, is left as it is.
func (c upgradeChoice) changes() bool {
	return c.from != c.release.Image || c.added > 0
}

// patch is the JSON merge patch of the choice: the resourceVersion makes
// the API server refuse it (409 Conflict) if the pool changed since it
// was read, so that a choice is never applied to a pool it was not made
// on. acceptedRisks is replaced whole: a merge patch cannot append.
func (c upgradeChoice) patch() map[string]any {
	spec := map[string]any{"osImage": c.release.Image}
	if len(c.accepted) > 0 {
		spec["updateSource"] = map[string]any{"acceptedRisks": c.acceptedRisks}
	}
	return map[string]any{"metadata": map[string]any{"resourceVersion": c.resourceVersion}, "spec": spec}
}

// patchOptions makes a dry run a server-side one: the API server validates
// the patch against the CRD and the resourceVersion, and stores nothing.
func patchOptions(dryRun bool) metav1.PatchOptions {
	if dryRun {
		return metav1.PatchOptions{DryRun: []string{metav1.DryRunAll}}
	}
	return metav1.PatchOptions{}
}
