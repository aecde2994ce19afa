package osupdate

import (
	"context"
	"fmt"
	"strings"
	"time"

	"github.com/nodeward/nodeward/hostexec"
)

// FinalizeUnit is the unit that writes a staged deployment at shutdown.
const FinalizeUnit = "ostree-finalize-staged.service"

// JournalReader reads the previous boot's journal lines of a unit.
type JournalReader interface {
	PreviousBoot(ctx context.Context, unit string) ([]string, error)
}

// Journalctl reads the journal with journalctl(1), the host's.
type Journalctl struct {
	Host hostexec.Host
}

// PreviousBoot implements JournalReader.
func (j Journalctl) PreviousBoot(ctx context.Context, unit string) ([]string, error) {
	ctx, cancel := context.WithTimeout(ctx, 30*time.Second)
	defer cancel()
	cmd := j.Host.Command(ctx, "journalctl", "-b", "-1", "-o", "cat", "--no-pager", "-u", unit)
	out, err := cmd.CombinedOutput()
	if err != nil {
		// No previous boot in the journal (volatile storage) is not a
		// finalization failure; say so and carry on.
		if strings.Contains(string(out), "No journal boot entry found") || strings.Contains(string(out), "Specifying boot ID or boot offset has no effect") {
			return nil, nil
		}
		return nil, fmt.Errorf("reading previous boot journal of %s: %w: %s", unit, err, strings.TrimSpace(string(out)))
	}
	return strings.Split(strings.TrimRight(string(out), "\n"), "\n"), nil
}

// finalizeErrors returns the error lines ostree-finalize-staged logged.
func finalizeErrors(lines []string) []string {
	var errs []string
	for _, l := range lines {
		if strings.HasPrefix(l, "error:") || strings.Contains(l, "Failed with result") {
			errs = append(errs, l)
		}
	}
	return errs
}
