package update

import (
	"encoding/json"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"time"

	"github.com/nodeward/nodeward/api/v1alpha1"
	"github.com/nodeward/nodeward/atomicfile"
)

// State is what the agent persists about the update in progress. It is
// written to the state file before each action and mirrored to the node's
// annotations.
type State struct {
	Step v1alpha1.Step `json:"step"`
	// Target is the OS image (or version) being rolled out.
	Target string `json:"target,omitempty"`
	// Grant identifies the slot the coordinator granted, so that a stale
	// grant from an earlier rollout is never mistaken for a new one.
	Grant string `json:"grant,omitempty"`
	// ReleaseAtDone is true when Grant is to be given back in the report
	// of Done (the grant's AnnotationReleaseAtDone); it means nothing
	// without a Grant.
	ReleaseAtDone bool `json:"releaseAtDone,omitempty"`
	// Cordoned is true once nodeward has cordoned the node for this update
	// (never when an admin had cordoned it).
	Cordoned bool `json:"cordoned,omitempty"`
	// BootID is the kernel boot ID when the reboot was requested: a
	// different boot ID later proves the reboot happened.
	BootID string `json:"bootID,omitempty"`
	// PreviousOS is the OS booted before the update, for verification
	// messages and the rollback.
	PreviousOS string `json:"previousOS,omitempty"`
	// StagedBeforeSlot is true when staging finished before the grant.
	StagedBeforeSlot bool `json:"stagedBeforeSlot,omitempty"`
	// RollingBack is true while the reboot into the previous deployment
	// after a failed verification is pending.
	RollingBack bool `json:"rollingBack,omitempty"`
	// LastGrant is the grant of the update before this one: a grant is
	// used for one update only, never again.
	LastGrant string `json:"lastGrant,omitempty"`
	// NodeUID is the UID of the Node object the grant was taken on: a
	// Node deleted and created again is a new object, without the grant,
	// neither cordoned nor drained, and is never cordoned, drained or
	// rebooted on the old object's grant.
	NodeUID string `json:"nodeUID,omitempty"`
	// StagedBootID is the boot ID when the target was staged. A
	// finalization-locked deployment does not survive a reboot: a
	// different boot ID means the target must be staged again.
	StagedBootID string `json:"stagedBootID,omitempty"`
	// Finalized is true from the finalize until the boot: the next boot,
	// planned or not, starts the target, so the node must be drained
	// before it whatever happens to its grant.
	Finalized bool `json:"finalized,omitempty"`
	// FailedBoots counts the boots after finalizing that came up on the
	// previous OS (the new deployment never booted).
	FailedBoots int `json:"failedBoots,omitempty"`
	// Refused is true when the OS updater refused the target (ErrRefused):
	// Degraded with nothing applied, until the target changes.
	Refused bool `json:"refused,omitempty"`
	// Disruption is what this update asks of the node, decided once after
	// staging (LiveUpdater); the zero value drains and reboots.
	Disruption Disruption `json:"disruption,omitzero"`
	// Reason explains Degraded, RolledBack and Yielded.
	Reason string `json:"reason,omitempty"`

	StepSince        time.Time `json:"stepSince,omitzero"`
	UnavailableSince time.Time `json:"unavailableSince,omitzero"`
	// DrainSince is when draining first started for this grant; a drain
	// blocked beyond the drain timeout yields.
	DrainSince time.Time `json:"drainSince,omitzero"`
}

// StateStore persists the machine's State: Store on a real host, an
// in-memory model in the protocol simulator.
type StateStore interface {
	// Load returns the persisted state, or an Idle state when there is
	// none.
	Load() (State, error)
	// Save persists st so that a crash after it returns keeps st.
	Save(st State) error
}

// Store keeps State in one file, replaced atomically: a crash leaves
// either the old or the new state, never a torn one.
type Store struct {
	Path string
}

// Load returns the persisted state, or an Idle state when there is none.
func (s Store) Load() (State, error) {
	data, err := os.ReadFile(s.Path)
	if errors.Is(err, fs.ErrNotExist) {
		return State{Step: v1alpha1.StepIdle}, nil
	}
	if err != nil {
		return State{}, fmt.Errorf("read update state %s: %w", s.Path, err)
	}
	var st State
	if err := json.Unmarshal(data, &st); err != nil {
		return State{}, fmt.Errorf("parse update state %s: %w", s.Path, err)
	}
	if !st.Step.Valid() {
		return State{}, fmt.Errorf("update state %s: unknown step %q", s.Path, st.Step)
	}
	return st, nil
}

// Save replaces the state file atomically (atomicfile): a crash leaves
// the old or the new state, never a torn one.
func (s Store) Save(st State) error {
	if err := atomicfile.WriteJSON(s.Path, st, 0o644); err != nil {
		return fmt.Errorf("save update state: %w", err)
	}
	return nil
}
