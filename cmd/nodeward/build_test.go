package main

import (
	"os/exec"
	"strings"
	"testing"
)

// TestReleaseBuildLeavesOutNetTrace: built as `make build` builds it (tag
// grpcnotrace), the binary must not link golang.org/x/net/trace: its HTML
// templates make the linker keep every exported method of every type that
// reaches an interface, which took the binary from 46 MB to 75 MB and the
// agent's resident memory up with it. A new dependency that imports the
// package again fails here.
func TestReleaseBuildLeavesOutNetTrace(t *testing.T) {
	out, err := exec.Command("go", "list", "-deps", "-tags", "grpcnotrace", ".").CombinedOutput()
	if err != nil {
		t.Fatalf("go list: %v\n%s", err, out)
	}
	for _, pkg := range strings.Fields(string(out)) {
		if pkg == "golang.org/x/net/trace" || pkg == "html/template" || pkg == "plugin" {
			t.Errorf("cmd/nodeward links %s with -tags grpcnotrace; see BUILD_TAGS in the Makefile and the agent RSS notes in docs/benchmarks.md", pkg)
		}
	}
}
