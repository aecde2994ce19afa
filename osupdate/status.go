package osupdate

import (
	"encoding/json"
	"errors"
	"fmt"

	rpmostree "github.com/coreos/rpmostree-client-go/pkg/client"
)

// Status is `rpm-ostree status --json`, read through rpmostree-client-go's
// types plus the fields those types lack.
type Status struct {
	rpmostree.Status
	// FinalizationLocked is true when the staged deployment carries the
	// finalization lock ("finalization-locked" in the JSON).
	FinalizationLocked bool
	// TransactionActive is true while rpm-ostree runs a transaction.
	TransactionActive bool
}

// rawStatus holds what rpmostree-client-go's Status does not decode.
type rawStatus struct {
	Deployments []struct {
		Staged             bool `json:"staged"`
		FinalizationLocked bool `json:"finalization-locked"`
	} `json:"deployments"`
	Transaction json.RawMessage `json:"transaction"`
}

// ParseStatus decodes and sanity-checks `rpm-ostree status --json` output:
// there must be exactly one booted deployment, at most one staged one, and
// every deployment must carry a checksum.
func ParseStatus(data []byte) (*Status, error) {
	var st Status
	if err := json.Unmarshal(data, &st.Status); err != nil {
		return nil, fmt.Errorf("decoding rpm-ostree status: %w", err)
	}
	var raw rawStatus
	if err := json.Unmarshal(data, &raw); err != nil {
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
	for _, d := range raw.Deployments {
		if d.Staged && d.FinalizationLocked {
			st.FinalizationLocked = true
		}
	}
	st.TransactionActive = len(raw.Transaction) > 0 && string(raw.Transaction) != "null"
	return &st, nil
}

// Booted returns the booted deployment (ParseStatus guarantees one).
func (s *Status) Booted() *rpmostree.Deployment {
	d, err := s.GetBootedDeployment()
	if err != nil {
		return nil
	}
	return d
}

// Staged returns the staged deployment or nil.
func (s *Status) Staged() *rpmostree.Deployment { return s.GetStagedDeployment() }

// Rollback returns the deployment `rpm-ostree rollback` would make the
// default: the first one neither booted nor staged, or nil.
func (s *Status) Rollback() *rpmostree.Deployment { return s.GetRollbackDeployment() }

// deploymentMatches tells whether d is t's OS (kernel arguments aside). A
// tag reference matches by reference, or by digest when wantDigest is known
// (what was staged); a digest-pinned reference matches by digest.
func deploymentMatches(d *rpmostree.Deployment, t Target, wantDigest string) bool {
	if d == nil {
		return false
	}
	if !t.IsImage() {
		return d.Checksum == t.Checksum || d.GetBaseChecksum() == t.Checksum
	}
	if d.ContainerImageReference != t.ImageRef {
		return false
	}
	if t.Digest != "" {
		wantDigest = t.Digest
	}
	return wantDigest == "" || d.ContainerImageReferenceDigest == wantDigest
}
