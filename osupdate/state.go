package osupdate

import (
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"path/filepath"
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

// saveState writes through a temporary file, fsync and rename so that a
// crash leaves either the old or the new state, never half of one.
func saveState(path string, p persisted) error {
	data, err := json.MarshalIndent(p, "", "  ")
	if err != nil {
		return fmt.Errorf("encoding osupdate state: %w", err)
	}
	dir := filepath.Dir(path)
	if err := os.MkdirAll(dir, 0o700); err != nil {
		return fmt.Errorf("creating state dir: %w", err)
	}
	f, err := os.CreateTemp(dir, ".osupdate-state-*")
	if err != nil {
		return fmt.Errorf("writing osupdate state: %w", err)
	}
	defer os.Remove(f.Name())
	if _, err := f.Write(data); err != nil {
		f.Close()
		return fmt.Errorf("writing osupdate state: %w", err)
	}
	if err := f.Sync(); err != nil {
		f.Close()
		return fmt.Errorf("syncing osupdate state: %w", err)
	}
	if err := f.Close(); err != nil {
		return fmt.Errorf("writing osupdate state: %w", err)
	}
	if err := os.Rename(f.Name(), path); err != nil {
		return fmt.Errorf("replacing osupdate state: %w", err)
	}
	if d, err := os.Open(dir); err == nil {
		_ = d.Sync()
		d.Close()
	}
	return nil
}
