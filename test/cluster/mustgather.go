package cluster

import (
	"context"
	"encoding/json"
	"errors"
	"os"
	"os/exec"
	"path/filepath"
	"testing"
	"time"

	"github.com/nodeward/nodeward/mustgather"
)

// Gathered is what `nodeward must-gather --dest-dir` wrote: its directory,
// its index and its progress lines (stderr).
type Gathered struct {
	Dir      string
	Index    mustgather.Index
	Progress string
}

// MustGather runs the nodeward binary's `must-gather --dest-dir` against
// cp within 2 minutes. Exit 0, or 2 (some parts failed, each named in the
// index: kwok's nodes serve no logs) pass; anything else fails t.
func (cp *ControlPlane) MustGather(t testing.TB) *Gathered {
	t.Helper()
	bin, err := NodewardBinary(ReleaseBuild)
	if err != nil {
		t.Fatal(err)
	}
	g := &Gathered{Dir: filepath.Join(t.TempDir(), "mg")}
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	out, err := exec.CommandContext(ctx, bin, "must-gather", "--kubeconfig", cp.KubeconfigPath(), "--dest-dir", g.Dir).CombinedOutput()
	g.Progress = string(out)
	var exit *exec.ExitError
	if err != nil && (!errors.As(err, &exit) || exit.ExitCode() != 2) {
		t.Fatalf("must-gather: %v\n%s", err, out)
	}
	if err := json.Unmarshal(g.File(t, "index.json"), &g.Index); err != nil {
		t.Fatalf("must-gather's index.json: %v", err)
	}
	return g
}

// File is the gathered file name (slash-separated, below the directory);
// its absence fails t.
func (g *Gathered) File(t testing.TB, name string) []byte {
	t.Helper()
	data, err := os.ReadFile(filepath.Join(g.Dir, filepath.FromSlash(name)))
	if err != nil {
		t.Fatalf("the archive lacks %s: %v\n%s", name, err, g.Progress)
	}
	return data
}
