package osupdate

import (
	"encoding/json"
	"errors"
	"fmt"
	"os"

	"github.com/nodeward/nodeward/atomicfile"
)

// persisted is what osupdate remembers across reboots, in one JSON file
// replaced atomically.
type persisted struct {
	// Staged is the target nodeward staged, with the deployment it got.
	Staged *stagedRecord `json:"staged,omitempty"`
	// RolledBack lists targets (canonical) already rolled back once; they
	// are neither rolled back again nor staged again.
	RolledBack []string `json:"rolledBack,omitempty"`
	// FailedTarget is the last target that failed verification.
	FailedTarget string `json:"failedTarget,omitempty"`
	// FailureReason says why it failed.
	FailureReason string `json:"failureReason,omitempty"`
}

type stagedRecord struct {
	Target   string `json:"target"`
	Checksum string `json:"checksum"`
	Digest   string `json:"digest,omitempty"`
}

func loadState(path string) (persisted, error) {
	var p persisted
	data, err := os.ReadFile(path)
	if errors.Is(err, os.ErrNotExist) {
		return p, nil
	}
	if err != nil {
		return p, fmt.Errorf("reading osupdate state: %w", err)
	}
	if err := json.Unmarshal(data, &p); err != nil {
		return p, fmt.Errorf("decoding osupdate state %s: %w", path, err)
	}
	return p, nil
}

// saveState replaces the state atomically (atomicfile): a crash leaves
// either the old or the new state, never half of one.
func saveState(path string, p persisted) error {
	if err := atomicfile.WriteJSON(path, p, 0o600); err != nil {
		return fmt.Errorf("saving osupdate state: %w", err)
	}
	return nil
}
