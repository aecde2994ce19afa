package machineconfig

import (
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
)

// The backup lives in StateDir/backup: one blob per saved file, named by
// the hash of its host path, and journal.json listing every path an Apply
// may touch with what it held before. journal.json is replaced atomically
// and only after the blobs it names are synced, so it never refers to a
// half-written blob; paths are added to it before Apply touches them, and a
// path already in it is never recorded again, so a re-run after a crash
// does not take a half-applied file for the previous one.
const (
	backupDirName = "backup"
	journalName   = "journal.json"
	blobDirName   = "blobs"
)

// entry is the recorded previous state of one host path.
type entry struct {
	Path  string `json:"path"`
	State state  `json:"state"`
}

type journal struct {
	dir     string
	Entries []entry `json:"entries"`
	index   map[string]bool
}

// loadJournal reads the journal, or starts an empty one.
func loadJournal(stateDir string) (*journal, error) {
	j := &journal{dir: filepath.Join(stateDir, backupDirName), index: map[string]bool{}}
	b, err := os.ReadFile(filepath.Join(j.dir, journalName))
	if errors.Is(err, fs.ErrNotExist) {
		return j, nil
	}
	if err != nil {
		return nil, fmt.Errorf("reading the backup journal: %w", err)
	}
	if err := json.Unmarshal(b, j); err != nil {
		return nil, fmt.Errorf("reading the backup journal %s: %w", j.dir, err)
	}
	for _, e := range j.Entries {
		j.index[e.Path] = true
	}
	return j, nil
}

func (j *journal) blobPath(hostPath string) string {
	sum := sha256.Sum256([]byte(hostPath))
	return filepath.Join(j.dir, blobDirName, hex.EncodeToString(sum[:]))
}

// record saves the current state of every planned path the journal does
// not hold yet, then commits the journal.
func (j *journal) record(p *plan) error {
	added := 0
	for _, o := range p.ops {
		if j.index[o.hostPath] {
			continue
		}
		s, err := readState(o.disk)
		if err != nil {
			return fmt.Errorf("backing up %s: %w", o.hostPath, err)
		}
		if err := j.saveBlob(o.hostPath, s); err != nil {
			return err
		}
		j.Entries = append(j.Entries, entry{Path: o.hostPath, State: s})
		j.index[o.hostPath] = true
		added++
	}
	if added == 0 {
		return nil
	}
	return j.save()
}

func (j *journal) saveBlob(hostPath string, s state) error {
	if s.Kind != kindFile {
		return nil
	}
	if err := os.MkdirAll(filepath.Join(j.dir, blobDirName), 0o700); err != nil {
		return fmt.Errorf("backing up %s: %w", hostPath, err)
	}
	blob := state{Kind: kindFile, Mode: 0o600, UID: -1, GID: -1, Contents: s.Contents}
	if err := writeFileAtomic(j.blobPath(hostPath), blob); err != nil {
		return fmt.Errorf("backing up %s: %w", hostPath, err)
	}
	return nil
}

func (j *journal) save() error {
	b, err := json.MarshalIndent(j, "", "  ")
	if err != nil {
		return fmt.Errorf("encoding the backup journal: %w", err)
	}
	if err := os.MkdirAll(j.dir, 0o700); err != nil {
		return fmt.Errorf("writing the backup journal: %w", err)
	}
	s := state{Kind: kindFile, Mode: 0o600, UID: -1, GID: -1, Contents: b}
	if err := writeFileAtomic(filepath.Join(j.dir, journalName), s); err != nil {
		return fmt.Errorf("writing the backup journal: %w", err)
	}
	return nil
}

// previous returns the recorded state of an entry, with its contents.
func (j *journal) previous(e entry) (state, error) {
	s := e.State
	if s.Kind != kindFile {
		return s, nil
	}
	b, err := os.ReadFile(j.blobPath(e.Path))
	if err != nil {
		return state{}, fmt.Errorf("reading the backup of %s: %w", e.Path, err)
	}
	s.Contents = b
	return s, nil
}

// forget removes the backup: the journal first, so that a crash halfway
// leaves no journal naming missing blobs.
func (j *journal) forget() error {
	if err := remove(filepath.Join(j.dir, journalName)); err != nil && !errors.Is(err, fs.ErrNotExist) {
		return fmt.Errorf("removing the backup journal: %w", err)
	}
	if err := os.RemoveAll(j.dir); err != nil {
		return fmt.Errorf("removing the backup: %w", err)
	}
	return nil
}
