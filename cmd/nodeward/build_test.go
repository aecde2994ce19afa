package main

import (
	"go/ast"
	"go/parser"
	"go/token"
	"go/types"
	"io/fs"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"

	"github.com/fzipp/gocyclo"
)

// TestReleaseBuildLeavesOutHeavyPackages: built as `make build` builds it
// (tag grpcnotrace), the binary must not link
//   - golang.org/x/net/trace, html/template or plugin: they make the linker
//     keep every exported method of every type that reaches an interface
//     (46 MB → 75 MB, and plugin exports every symbol besides);
//   - client-go's scheme of every API group, the clientset or the typed
//     informers: their init registers 55 group versions (+14 MB of binary,
//     +7 MiB of agent RSS); package api/kube is the client to use.
//
// A new dependency that imports one of them again fails here.
func TestReleaseBuildLeavesOutHeavyPackages(t *testing.T) {
	out, err := exec.Command("go", "list", "-deps", "-tags", "grpcnotrace", ".").CombinedOutput()
	if err != nil {
		t.Fatalf("go list: %v\n%s", err, out)
	}
	forbidden := map[string]bool{
		"golang.org/x/net/trace": true, "html/template": true, "plugin": true,
		"k8s.io/client-go/kubernetes": true, "k8s.io/client-go/kubernetes/scheme": true,
		"k8s.io/client-go/informers": true, "k8s.io/client-go/tools/leaderelection": true,
		// Their package initializers fill every agent's heap at start
		// (docs/benchmarks.md, "Agent RSS without the packages that fill
		// the heap at start-up"): osupdate, conditions and api/kube
		// replace them.
		"github.com/distribution/reference": true, "github.com/containers/image/v5/docker/reference": true,
		"github.com/opencontainers/go-digest": true, "github.com/coreos/rpmostree-client-go/pkg/client": true,
		"k8s.io/cri-api/pkg/apis/runtime/v1": true, "k8s.io/client-go/tools/record": true,
		"k8s.io/client-go/gentype": true, "k8s.io/client-go/testing": true,
		"k8s.io/apimachinery/pkg/util/strategicpatch": true, "github.com/google/gnostic-models/openapiv2": true,
	}
	for _, pkg := range strings.Fields(string(out)) {
		if forbidden[pkg] {
			t.Errorf("cmd/nodeward links %s with -tags grpcnotrace; see BUILD_TAGS in the Makefile and the agent RSS notes in docs/benchmarks.md", pkg)
		}
	}
}

// TestPackagesImportOneWay keeps the layout the architecture
// (docs/architecture.md): cmd → daemon and coordinator → conditions, drain,
// osupdate, systemd → api. The coordinator links nothing of the agent and
// the agent nothing of the coordinator; the lower layers link neither.
func TestPackagesImportOneWay(t *testing.T) {
	const mod = "github.com/nodeward/nodeward/"
	agent := []string{"daemon", "daemon/health", "daemon/update", "daemon/mco", "conditions", "osupdate", "systemd"}
	rules := map[string][]string{
		"coordinator":   agent,
		"daemon":        {"coordinator", "cmd/nodeward"},
		"daemon/update": {"coordinator", "daemon", "daemon/health", "daemon/mco", "conditions", "systemd"},
		// The MCD's side of the MCO protocol builds on the update machine,
		// never the other way.
		"daemon/mco":    {"coordinator", "daemon", "daemon/health", "conditions", "systemd"},
		"daemon/health": {"coordinator", "daemon", "daemon/update", "drain", "osupdate", "systemd"},
		"conditions":    {"coordinator", "daemon", "drain", "osupdate", "systemd"},
		"drain":         {"coordinator", "daemon", "conditions", "osupdate", "systemd"},
		"osupdate":      {"coordinator", "daemon", "conditions", "drain", "systemd"},
		"systemd":       {"coordinator", "daemon", "conditions", "drain", "osupdate"},
		"api/v1alpha1":  {"api/kube", "coordinator", "daemon", "conditions", "drain", "osupdate", "systemd"},
		"api/kube":      {"api/v1alpha1", "coordinator", "daemon", "conditions", "drain", "osupdate", "systemd"},
		// A leaf shared by osupdate and systemd: it links nothing of nodeward.
		"hostexec": {"api/v1alpha1", "api/kube", "coordinator", "daemon", "conditions", "drain", "osupdate", "systemd"},
		// The guard of /metrics, shared by the agent and the coordinator: a
		// leaf too.
		"api/kube/metricsauth": {"api/v1alpha1", "api/kube", "hostexec", "coordinator", "daemon", "conditions", "drain", "osupdate", "systemd"},
		// Leaves: the rendered MachineConfig, the atomic file writer.
		"machineconfig": {"api/v1alpha1", "api/kube", "hostexec", "coordinator", "daemon", "conditions", "drain", "osupdate", "systemd"},
		"atomicfile":    {"api/v1alpha1", "api/kube", "hostexec", "machineconfig", "coordinator", "daemon", "conditions", "drain", "osupdate", "systemd"},
		// The agent's release of start-up memory: a leaf on the kernel.
		"footprint": {"api/v1alpha1", "api/kube", "hostexec", "machineconfig", "atomicfile", "coordinator", "daemon", "conditions", "drain", "osupdate", "systemd"},
		// The coordinator's Alertmanager silences: a leaf on the API types
		// only, with its own small HTTP client.
		"silence": {"api/kube", "hostexec", "machineconfig", "atomicfile", "gate", "coordinator", "daemon", "conditions", "drain", "osupdate", "systemd"},
		// The health gates, used by the coordinator: a leaf on the API
		// types and the Prometheus client.
		"gate": {"api/kube", "hostexec", "machineconfig", "atomicfile", "silence", "objectgate", "coordinator", "daemon", "conditions", "drain", "osupdate", "systemd"},
		// The conditional update risks: a leaf on gate's Prometheus client
		// and updategraph's risk types.
		"updaterisk": {"api/kube", "hostexec", "machineconfig", "atomicfile", "silence", "objectgate", "coordinator", "daemon", "conditions", "drain", "osupdate", "systemd"},
		// The object gates: a leaf on the API types, gate's Verdict, the
		// dynamic client and cel-go.
		"objectgate": {"api/kube", "hostexec", "machineconfig", "atomicfile", "silence", "coordinator", "daemon", "conditions", "drain", "osupdate", "systemd"},
		// The kernel log, read by the agent's kernel probes: two leaves,
		// the /dev/kmsg reader and node-problem-detector's rule format,
		// neither knowing the other nor anything of nodeward.
		"kmsg": {"kernelrules", "api/v1alpha1", "api/kube", "hostexec", "machineconfig", "atomicfile", "coordinator", "daemon", "conditions", "drain", "osupdate", "systemd"},
		// The OOM kills of the kubepods memory cgroups: a leaf too.
		"oomkill":     {"kmsg", "kernelrules", "api/v1alpha1", "api/kube", "hostexec", "machineconfig", "atomicfile", "coordinator", "daemon", "conditions", "drain", "osupdate", "systemd"},
		"kernelrules": {"kmsg", "api/v1alpha1", "api/kube", "hostexec", "machineconfig", "atomicfile", "coordinator", "daemon", "conditions", "drain", "osupdate", "systemd"},
		// The MCO's Node Disruption Policies: a leaf on the parsed
		// rendered MachineConfig only.
		"disruption": {"kmsg", "kernelrules", "api/v1alpha1", "api/kube", "hostexec", "coordinator", "daemon", "daemon/update", "daemon/mco", "conditions", "drain", "osupdate", "systemd"},
		// The config drift monitor: a leaf on machineconfig, which it
		// checks with; nothing of the agent.
		"drift": {"kmsg", "kernelrules", "oomkill", "api/v1alpha1", "api/kube", "hostexec", "coordinator", "daemon", "daemon/update", "daemon/mco", "daemon/health", "conditions", "drain", "osupdate", "systemd"},
		// The update graphs (#39): a pure leaf, nothing of nodeward. The
		// coordinator will import it, never the other way.
		"updategraph": {"api/v1alpha1", "api/kube", "hostexec", "machineconfig", "atomicfile", "gate", "objectgate", "silence", "coordinator", "daemon", "daemon/update", "daemon/mco", "daemon/health", "conditions", "drain", "osupdate", "systemd"},
		// must-gather reads the cluster through the dynamic client and the
		// host's files: it links neither the agent nor the coordinator.
		"mustgather": {"api/kube", "hostexec", "coordinator", "daemon", "daemon/update", "daemon/mco", "daemon/health", "conditions", "drain", "osupdate", "systemd"},
		// Test libraries. test/cluster (control plane, CRDs, the nodeward
		// build) is imported by the tests of daemon (from inside package
		// daemon), drain and api/kube: it must link neither the agent nor
		// the coordinator, or the agent's tests would link the
		// coordinator, and the internal tests of a package it linked would
		// not compile (an import cycle). The tests' in-process coordinator
		// lives above it, in test/coordinatortest, and links nothing of
		// the agent, as the coordinator itself.
		"test/cluster":         {"coordinator", "daemon", "conditions", "drain", "osupdate", "systemd", "test/coordinatortest"},
		"test/coordinatortest": agent,
	}
	for pkg, forbidden := range rules {
		out, err := exec.Command("go", "list", "-deps", mod+pkg).CombinedOutput()
		if err != nil {
			t.Fatalf("go list %s: %v\n%s", pkg, err, out)
		}
		deps := map[string]bool{}
		for _, d := range strings.Fields(string(out)) {
			deps[d] = true
		}
		for _, f := range forbidden {
			if deps[mod+f] {
				t.Errorf("%s imports %s: imports flow cmd → daemon, coordinator → conditions, drain, osupdate, systemd → api", pkg, f)
			}
		}
	}
}

// The limits TestFunctionsStaySmall keeps: past them a function is read
// in pieces and its branches are no longer all tested; split it into
// named phases, or a table of small functions instead of a switch ladder.
const (
	maxFunctionLines      = 80
	maxFunctionComplexity = 20
)

// TestFunctionsStaySmall fails for every function, in every non-test Go
// file of the module, longer than maxFunctionLines (from `func` to the
// closing brace) or of a cyclomatic complexity, as gocyclo counts it, over
// maxFunctionComplexity. Generated files and the nested modules
// (test/helmsync, test/tools) are not ours to shape and are left out.
func TestFunctionsStaySmall(t *testing.T) {
	out, err := exec.Command("go", "env", "GOMOD").Output()
	if err != nil {
		t.Fatalf("go env GOMOD: %v", err)
	}
	root := filepath.Dir(strings.TrimSpace(string(out)))
	files, err := moduleSourceFiles(root)
	if err != nil {
		t.Fatalf("listing the Go files under %s: %v", root, err)
	}
	fset := token.NewFileSet()
	for _, path := range files {
		file, err := parser.ParseFile(fset, path, nil, parser.ParseComments|parser.SkipObjectResolution)
		if err != nil {
			t.Fatalf("parsing %s: %v", path, err)
		}
		if ast.IsGenerated(file) {
			continue
		}
		for _, fn := range functionsOf(file) {
			start, end := fset.Position(fn.node.Pos()), fset.Position(fn.node.End())
			rel, _ := filepath.Rel(root, start.Filename)
			if lines := end.Line - start.Line + 1; lines > maxFunctionLines {
				t.Errorf("%s:%d: %s is %d lines long, over the limit of %d", rel, start.Line, fn.name, lines, maxFunctionLines)
			}
			if complexity := gocyclo.Complexity(fn.node); complexity > maxFunctionComplexity {
				t.Errorf("%s:%d: %s has cyclomatic complexity %d, over the limit of %d", rel, start.Line, fn.name, complexity, maxFunctionComplexity)
			}
		}
	}
}

// moduleSourceFiles lists the non-test Go files under root that belong to
// its module: the walk skips the directories the go tool ignores (testdata,
// and names starting with . or _) and those holding a go.mod of their own.
func moduleSourceFiles(root string) ([]string, error) {
	var files []string
	err := filepath.WalkDir(root, func(path string, entry fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		if entry.IsDir() {
			if path == root {
				return nil
			}
			name := entry.Name()
			if name == "testdata" || strings.HasPrefix(name, ".") || strings.HasPrefix(name, "_") {
				return filepath.SkipDir
			}
			if _, err := os.Stat(filepath.Join(path, "go.mod")); err == nil {
				return filepath.SkipDir
			}
			return nil
		}
		if strings.HasSuffix(path, ".go") && !strings.HasSuffix(path, "_test.go") {
			files = append(files, path)
		}
		return nil
	})
	return files, err
}

// measuredFunction is a function TestFunctionsStaySmall measures: a
// declared function or method, or a function literal assigned to a
// package-level variable (gocyclo counts those too).
type measuredFunction struct {
	name string
	node ast.Node
}

func functionsOf(file *ast.File) []measuredFunction {
	var fns []measuredFunction
	for _, decl := range file.Decls {
		switch decl := decl.(type) {
		case *ast.FuncDecl:
			fns = append(fns, measuredFunction{name: declaredName(decl), node: decl})
		case *ast.GenDecl:
			for _, spec := range decl.Specs {
				value, ok := spec.(*ast.ValueSpec)
				if !ok {
					continue
				}
				for i, expr := range value.Values {
					if lit, ok := expr.(*ast.FuncLit); ok && i < len(value.Names) {
						fns = append(fns, measuredFunction{name: value.Names[i].Name, node: lit})
					}
				}
			}
		}
	}
	return fns
}

// declaredName names a function as gocyclo does: "(*T).M" for a method.
func declaredName(fn *ast.FuncDecl) string {
	if fn.Recv == nil || len(fn.Recv.List) == 0 {
		return fn.Name.Name
	}
	return "(" + types.ExprString(fn.Recv.List[0].Type) + ")." + fn.Name.Name
}
