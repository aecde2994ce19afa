package conditions

import (
	"encoding/json"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"strings"

	"github.com/nodeward/nodeward/atomicfile"
)

// kernelCursor is where the kernel log was read up to, kept in a file
// across agent restarts within one boot: a restarted agent reads the
// look-back again (so the permanent problems logged before are found
// again) but sends no second Event for a temporary problem it already
// reported. A cursor of another boot, or none, hides nothing.
type kernelCursor struct {
	path   string // empty: no cursor kept
	bootID string
}

type cursorFile struct {
	BootID string `json:"bootID"`
	Seq    uint64 `json:"seq"`
}

func newKernelCursor(path, procRoot string) kernelCursor {
	id, _ := os.ReadFile(filepath.Join(procRoot, "sys", "kernel", "random", "boot_id"))
	return kernelCursor{path: path, bootID: strings.TrimSpace(string(id))}
}

// load returns the sequence number up to which this boot's records were
// handled, and whether there is one.
func (c kernelCursor) load() (uint64, bool, error) {
	if c.path == "" || c.bootID == "" {
		return 0, false, nil
	}
	data, err := os.ReadFile(c.path)
	if errors.Is(err, fs.ErrNotExist) {
		return 0, false, nil
	}
	if err != nil {
		return 0, false, fmt.Errorf("read the kernel log cursor: %w", err)
	}
	var f cursorFile
	if err := json.Unmarshal(data, &f); err != nil {
		return 0, false, fmt.Errorf("read the kernel log cursor %s: %w", c.path, err)
	}
	return f.Seq, f.BootID == c.bootID, nil
}

// save records that this boot's records up to seq were handled.
func (c kernelCursor) save(seq uint64) error {
	if c.path == "" || c.bootID == "" {
		return nil
	}
	if err := atomicfile.WriteJSON(c.path, cursorFile{BootID: c.bootID, Seq: seq}, 0o600); err != nil {
		return fmt.Errorf("save the kernel log cursor: %w", err)
	}
	return nil
}
