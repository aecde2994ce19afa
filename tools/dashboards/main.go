// Command dashboards writes nodeward's Grafana dashboards and their
// OpenShift console variants from one model (panels.go) with Grafana's
// foundation SDK: `go run ./tools/dashboards` from the repository root, or
// `make dashboards`. Its own module, so that neither the nodeward binary
// nor the main go.mod carry the SDK. The test of this package fails when a
// checked-in file differs from what it writes.
package main

import (
	"flag"
	"fmt"
	"os"
	"path/filepath"
	"sort"
)

func main() {
	root := flag.String("root", "../..", "the repository root")
	flag.Parse()
	if err := write(*root); err != nil {
		fmt.Fprintln(os.Stderr, "dashboards:", err)
		os.Exit(1)
	}
}

// write writes every generated file under root.
func write(root string) error {
	files, err := generate()
	if err != nil {
		return err
	}
	paths := make([]string, 0, len(files))
	for p := range files {
		paths = append(paths, p)
	}
	sort.Strings(paths)
	for _, p := range paths {
		full := filepath.Join(root, p)
		if err := os.MkdirAll(filepath.Dir(full), 0o755); err != nil {
			return fmt.Errorf("create the directory of %s: %w", p, err)
		}
		if err := os.WriteFile(full, files[p], 0o644); err != nil {
			return fmt.Errorf("write %s: %w", p, err)
		}
		fmt.Println("wrote", p)
	}
	return nil
}
