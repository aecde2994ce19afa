package daemon

import (
	"encoding/json"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"time"
)

// Step names where the update lifecycle of this node stands. A step names
// the action the agent is taking (or about to take): the step is persisted
// before the action starts, so after a crash the same action is redone, and
// every action is idempotent.
type Step string

// The steps of one update, in order, then the terminal and side steps.
const (
	StepIdle           Step = "Idle"           // nothing to do: booted OS is the target
	StepStaging        Step = "Staging"        // downloading and staging the target, finalization locked
	StepStaged         Step = "Staged"         // staged, waiting for a slot
	StepGranted        Step = "Granted"        // the coordinator granted a slot
	StepHooksPreDrain  Step = "HooksPreDrain"  // waiting for pre-drain hooks to be removed
	StepCordoning      Step = "Cordoning"      // marking the node unschedulable
	StepDraining       Step = "Draining"       // evicting pods
	StepHooksPreReboot Step = "HooksPreReboot" // waiting for pre-reboot hooks to be removed
	StepFinalizing     Step = "Finalizing"     // unlocking the staged deployment
	StepRebooting      Step = "Rebooting"      // reboot requested; resumes in Verifying after boot
	StepVerifying      Step = "Verifying"      // checking the booted OS is the target
	StepWaitingHealthy Step = "WaitingHealthy" // waiting for node Ready and health conditions clear
	StepUncordoning    Step = "Uncordoning"    // making the node schedulable again (if we cordoned it)
	StepDone           Step = "Done"           // target booted and node back; slot released

	StepYielding    Step = "Yielding"    // drain blocked too long: undoing the cordon to give the slot back
	StepYielded     Step = "Yielded"     // slot given back without updating; retried on a later grant
	StepRollingBack Step = "RollingBack" // verification failed: rolling back and rebooting
	StepRolledBack  Step = "RolledBack"  // booted back into the previous deployment
	StepDegraded    Step = "Degraded"    // needs an operator or a new target; keeps its slot
)

// AllSteps lists every step, for metrics and validation.
func AllSteps() []Step {
	return []Step{StepIdle, StepStaging, StepStaged, StepGranted, StepHooksPreDrain, StepCordoning,
		StepDraining, StepHooksPreReboot, StepFinalizing, StepRebooting, StepVerifying, StepWaitingHealthy,
		StepUncordoning, StepDone, StepYielding, StepYielded, StepRollingBack, StepRolledBack, StepDegraded}
}

// Valid reports whether s is a known step.
func (s Step) Valid() bool {
	for _, k := range AllSteps() {
		if k == s {
			return true
		}
	}
	return false
}

// Unavailable reports whether the node is (or may be) disrupted in step s:
// from the cordon until the uncordon. The coordinator counts such nodes
// against maxUnavailable.
func (s Step) Unavailable() bool {
	switch s {
	case StepCordoning, StepDraining, StepHooksPreReboot, StepFinalizing, StepRebooting, StepVerifying,
		StepWaitingHealthy, StepUncordoning, StepYielding, StepRollingBack, StepRolledBack, StepDegraded:
		return true
	}
	return false
}

// HoldsSlot reports whether a node in step s holds a slot of its pool.
func (s Step) HoldsSlot() bool {
	return s == StepGranted || s == StepHooksPreDrain || s.Unavailable()
}

// State is what the agent persists about the update in progress. It is
// written to the state file before each action and mirrored to the node's
// annotations.
type State struct {
	Step Step `json:"step"`
	// Target is the OS image (or version) being rolled out.
	Target string `json:"target,omitempty"`
	// Grant identifies the slot the coordinator granted, so that a stale
	// grant from an earlier rollout is never mistaken for a new one.
	Grant string `json:"grant,omitempty"`
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
	// Reason explains Degraded, RolledBack and Yielded.
	Reason string `json:"reason,omitempty"`

	StepSince        time.Time `json:"stepSince,omitzero"`
	UnavailableSince time.Time `json:"unavailableSince,omitzero"`
	// DrainSince is when draining first started for this grant; a drain
	// blocked beyond the drain timeout yields.
	DrainSince time.Time `json:"drainSince,omitzero"`
}

// StateStore keeps State in one file, replaced atomically: a crash leaves
// either the old or the new state, never a torn one.
type StateStore struct {
	Path string
}

// Load returns the persisted state, or an Idle state when there is none.
func (s StateStore) Load() (State, error) {
	data, err := os.ReadFile(s.Path)
	if errors.Is(err, fs.ErrNotExist) {
		return State{Step: StepIdle}, nil
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

// Save writes st to a temporary file in the same directory, syncs it,
// renames it over the state file and syncs the directory so the rename
// itself survives a power loss.
func (s StateStore) Save(st State) error {
	data, err := json.MarshalIndent(st, "", "  ")
	if err != nil {
		return fmt.Errorf("encode update state: %w", err)
	}
	dir := filepath.Dir(s.Path)
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return fmt.Errorf("create state directory %s: %w", dir, err)
	}
	tmp, err := os.CreateTemp(dir, filepath.Base(s.Path)+".tmp-*")
	if err != nil {
		return fmt.Errorf("create temporary state file in %s: %w", dir, err)
	}
	defer os.Remove(tmp.Name()) // no-op after the rename
	if _, err := tmp.Write(append(data, '\n')); err != nil {
		tmp.Close()
		return fmt.Errorf("write %s: %w", tmp.Name(), err)
	}
	if err := tmp.Sync(); err != nil {
		tmp.Close()
		return fmt.Errorf("sync %s: %w", tmp.Name(), err)
	}
	if err := tmp.Close(); err != nil {
		return fmt.Errorf("close %s: %w", tmp.Name(), err)
	}
	if err := os.Rename(tmp.Name(), s.Path); err != nil {
		return fmt.Errorf("replace update state %s: %w", s.Path, err)
	}
	d, err := os.Open(dir)
	if err != nil {
		return fmt.Errorf("open state directory %s: %w", dir, err)
	}
	defer d.Close()
	if err := d.Sync(); err != nil {
		return fmt.Errorf("sync state directory %s: %w", dir, err)
	}
	return nil
}
