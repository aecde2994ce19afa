package mustgather

import (
	"context"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"strings"
)

// hostFile is one file of a node the host part reads.
type hostFile struct {
	// path inside the host root; stateDir: relative to Options.StateDir.
	path        string
	stateDir    bool
	description string
}

// hostFiles: the agent's persisted update state (daemon/update's Store),
// its MCO-mode record (daemon/mco's Host) and host mode's configuration
// (manifests/host/config.yaml installed).
var hostFiles = []hostFile{
	{path: "update-state.json", stateDir: true, description: "the agent's persisted update state machine (step, target, boot ID)"},
	{path: "mco-host.json", stateDir: true, description: "the agent's MCO-mode record of the applied rendered config"},
	{path: "/etc/nodeward/config.yaml", description: "host mode's agent configuration"},
}

func collectHost(_ context.Context, g *Gatherer, w *partWriter) error {
	var found int
	var errs []error
	for _, f := range hostFiles {
		p := f.path
		if f.stateDir {
			p = filepath.Join(g.opts.StateDir, p)
		}
		data, err := os.ReadFile(filepath.Join(g.opts.HostRoot, p))
		if errors.Is(err, fs.ErrNotExist) {
			continue
		}
		if err != nil {
			errs = append(errs, fmt.Errorf("read %s: %w", p, err))
			continue
		}
		found++
		if err := w.file("host"+filepath.ToSlash(filepath.Clean("/"+p)), f.description, data); err != nil {
			return err
		}
	}
	if found == 0 && len(errs) == 0 {
		names := make([]string, len(hostFiles))
		for i, f := range hostFiles {
			names[i] = f.path
		}
		return fmt.Errorf("none of %s under %s (state dir %s)", strings.Join(names, ", "), g.opts.HostRoot, g.opts.StateDir)
	}
	return errors.Join(errs...)
}
