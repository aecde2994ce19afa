package drift

import (
	"os"
	"path/filepath"
	"sort"
)

// targets is what one arm of the watches covers: the directories watched
// and the paths whose events matter.
type targets struct {
	// dirs are the parent directories of the config's paths, or for a
	// parent not created yet its nearest existing ancestor; sorted, at
	// most the Monitor's MaxWatches.
	dirs []string
	// dropped counts the directories past MaxWatches: their paths are
	// re-checked by the periodic re-check only.
	dropped int
	// interesting holds every path and each of its ancestors: an event on
	// another entry of a watched directory (a file the config does not
	// name) is ignored; one on an ancestor (a missing parent created, a
	// watched directory removed) re-arms the watches.
	interesting map[string]bool
}

// targetsOf lists the directories to watch for paths, absolute and clean.
func targetsOf(paths []string, maxWatches int) targets {
	t := targets{interesting: make(map[string]bool, 2*len(paths))}
	dirs := map[string]bool{}
	for _, p := range paths {
		t.interesting[p] = true
		for d := filepath.Dir(p); !t.interesting[d]; d = filepath.Dir(d) {
			t.interesting[d] = true
			if d == "/" || d == "." {
				break
			}
		}
		dirs[existingDir(filepath.Dir(p))] = true
	}
	for d := range dirs {
		t.dirs = append(t.dirs, d)
	}
	sort.Strings(t.dirs)
	if len(t.dirs) > maxWatches {
		t.dropped = len(t.dirs) - maxWatches
		t.dirs = t.dirs[:maxWatches]
	}
	return t
}

// existingDir is dir, or its nearest ancestor that exists as a directory.
func existingDir(dir string) string {
	for {
		if fi, err := os.Stat(dir); err == nil && fi.IsDir() {
			return dir
		}
		parent := filepath.Dir(dir)
		if parent == dir {
			return dir
		}
		dir = parent
	}
}
