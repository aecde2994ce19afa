package osupdate

import (
	"encoding/json"
	"errors"
	"fmt"
)

// Status is `rpm-ostree status --json`, only what nodeward reads. Its own
// types rather than rpmostree-client-go's: that module links
// github.com/containers/image/v5/docker/reference and go-digest, whose
// regexps, compiled at init, would stay resident in the agent (see
// imageref.go). status_test.go decodes the library's real fixtures with
// both and checks they agree.
type Status struct {
	// Deployments in bootloader order; a staged one comes first.
	Deployments []Deployment `json:"deployments"`
	// Transaction is the running transaction (its verb and client), nil
	// when none runs.
	Transaction []string `json:"transaction"`

	// FinalizationLocked is true when the staged deployment carries the
	// finalization lock. Set by ParseStatus.
	FinalizationLocked bool `json:"-"`
	// TransactionActive is true while rpm-ostree runs a transaction. Set
	// by ParseStatus.
	TransactionActive bool `json:"-"`
}

// Deployment is one bootable filesystem tree of Status, the fields
// nodeward reads, under rpm-ostree's JSON names.
type Deployment struct {
	ID string `json:"id"`
	// Checksum is the deployment's OSTree commit; with layered packages
	// it differs from BaseChecksum.
	Checksum string `json:"checksum"`
	// BaseChecksum is the base commit when packages are layered, else nil
	// (use GetBaseChecksum).
	BaseChecksum *string `json:"base-checksum"`
	Booted       bool    `json:"booted"`
	Staged       bool    `json:"staged"`
	// FinalizationLocked is written only for a staged deployment whose
	// finalization is locked.
	FinalizationLocked bool `json:"finalization-locked"`
	// ContainerImageReference is the ostree image reference with its
	// transport, empty for a deployment not from a container image.
	ContainerImageReference       string `json:"container-image-reference"`
	ContainerImageReferenceDigest string `json:"container-image-reference-digest"`
}

// GetBaseChecksum returns the OSTree commit the deployment is based on:
// BaseChecksum when packages are layered, else Checksum.
func (d *Deployment) GetBaseChecksum() string {
	if d.BaseChecksum != nil {
		return *d.BaseChecksum
	}
	return d.Checksum
}

// ParseStatus decodes and sanity-checks `rpm-ostree status --json` output:
// there must be exactly one booted deployment, at most one staged one, and
// every deployment must carry a checksum. Keys nodeward does not read are
// ignored, whatever their value.
func ParseStatus(data []byte) (*Status, error) {
	var st Status
	if err := json.Unmarshal(data, &st); err != nil {
		return nil, fmt.Errorf("decoding rpm-ostree status: %w", err)
	}
	if st.Deployments == nil {
		return nil, errors.New("decoding rpm-ostree status: no \"deployments\" list")
	}
	booted, staged := 0, 0
	for i, d := range st.Deployments {
		if d.Checksum == "" {
			return nil, fmt.Errorf("decoding rpm-ostree status: deployment %d (%q) has no checksum", i, d.ID)
		}
		if d.Booted {
			booted++
		}
		if d.Staged {
			staged++
			if d.Booted {
				return nil, fmt.Errorf("decoding rpm-ostree status: deployment %q is both booted and staged", d.ID)
			}
		}
	}
	if booted != 1 {
		return nil, fmt.Errorf("decoding rpm-ostree status: %d booted deployments, want 1", booted)
	}
	if staged > 1 {
		return nil, fmt.Errorf("decoding rpm-ostree status: %d staged deployments, want at most 1", staged)
	}
	for _, d := range st.Deployments {
		if d.Staged && d.FinalizationLocked {
			st.FinalizationLocked = true
		}
	}
	// `"transaction": null` when none runs; any list, even empty, is one.
	st.TransactionActive = st.Transaction != nil
	return &st, nil
}

// Booted returns the first booted deployment (ParseStatus guarantees
// exactly one), or nil.
func (s *Status) Booted() *Deployment {
	return s.first(func(d *Deployment) bool { return d.Booted })
}

// Staged returns the first staged deployment (ParseStatus guarantees at
// most one), or nil.
func (s *Status) Staged() *Deployment {
	return s.first(func(d *Deployment) bool { return d.Staged })
}

// Rollback returns the deployment `rpm-ostree rollback` would make the
// default: the first one neither booted nor staged, or nil.
func (s *Status) Rollback() *Deployment {
	return s.first(func(d *Deployment) bool { return !d.Booted && !d.Staged })
}

// first returns the first deployment for which ok holds, or nil.
func (s *Status) first(ok func(*Deployment) bool) *Deployment {
	for i := range s.Deployments {
		if ok(&s.Deployments[i]) {
			return &s.Deployments[i]
		}
	}
	return nil
}

// deploymentMatches tells whether d is t's OS (kernel arguments aside). A
// tag reference matches by reference, or by digest when wantDigest is known
// (what was staged); a digest-pinned reference matches by digest.
func deploymentMatches(d *Deployment, t Target, wantDigest string) bool {
	if d == nil {
		return false
	}
	if !t.IsImage() {
		return d.Checksum == t.Checksum || d.GetBaseChecksum() == t.Checksum
	}
	if t.Digest != "" && d.ContainerImageReferenceDigest == t.Digest {
		// A target pinned by digest is the same OS as a deployment of that
		// digest under any name (a tag, a mirror): nothing to pull or boot.
		return true
	}
	if d.ContainerImageReference != t.ImageRef {
		return false
	}
	if t.Digest != "" {
		wantDigest = t.Digest
	}
	return wantDigest == "" || d.ContainerImageReferenceDigest == wantDigest
}
