package main

import (
	"encoding/json"
	"fmt"
	"go/ast"
	"go/importer"
	"go/parser"
	"go/token"
	"go/types"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"testing"
)

// TestCoordinatorFilesCallOneWay keeps the coordinator's files in layers:
// the functions of one file may use those of another only if no function
// of that file (directly or through others) uses the first one back. A
// reader then walks one reconcile downwards, file by file, and never
// returns to a file already read. A cycle fails with the references that
// close it.
func TestCoordinatorFilesCallOneWay(t *testing.T) {
	uses := fileUses(t, "github.com/nodeward/nodeward/coordinator")
	for _, cycle := range fileCycles(uses) {
		var refs []string
		for i, from := range cycle {
			to := cycle[(i+1)%len(cycle)]
			refs = append(refs, fmt.Sprintf("%s → %s (%s)", from, to, strings.Join(uses[from][to], ", ")))
		}
		t.Errorf("coordinator files call each other in a cycle; move the functions so that calls run one way:\n  %s", strings.Join(refs, "\n  "))
	}
}

// fileUses type-checks the package's non-test files and returns, for each
// file, the files whose functions it uses and which functions.
func fileUses(t *testing.T, pkgPath string) map[string]map[string][]string {
	t.Helper()
	out, err := exec.Command("go", "list", "-export", "-deps", "-json=ImportPath,Export,Dir,GoFiles", pkgPath).Output()
	if err != nil {
		t.Fatalf("go list -export %s: %v", pkgPath, err)
	}
	exports := map[string]string{}
	var dir string
	var files []string
	dec := json.NewDecoder(strings.NewReader(string(out)))
	for {
		var p struct {
			ImportPath, Export, Dir string
			GoFiles                 []string
		}
		if err := dec.Decode(&p); err == io.EOF {
			break
		} else if err != nil {
			t.Fatalf("decode go list: %v", err)
		}
		exports[p.ImportPath] = p.Export
		if p.ImportPath == pkgPath {
			dir, files = p.Dir, p.GoFiles
		}
	}
	fset := token.NewFileSet()
	var parsed []*ast.File
	for _, f := range files {
		af, err := parser.ParseFile(fset, filepath.Join(dir, f), nil, 0)
		if err != nil {
			t.Fatal(err)
		}
		parsed = append(parsed, af)
	}
	lookup := func(path string) (io.ReadCloser, error) {
		if exports[path] == "" {
			return nil, fmt.Errorf("no export data for %s", path)
		}
		return os.Open(exports[path])
	}
	info := &types.Info{Uses: map[*ast.Ident]types.Object{}}
	conf := types.Config{Importer: importer.ForCompiler(fset, "gc", lookup)}
	if _, err := conf.Check(pkgPath, fset, parsed, info); err != nil {
		t.Fatalf("type-check %s: %v", pkgPath, err)
	}
	uses := map[string]map[string][]string{}
	for id, obj := range info.Uses {
		fn, ok := obj.(*types.Func)
		if !ok || fn.Pkg() == nil || fn.Pkg().Path() != pkgPath || !fn.Pos().IsValid() {
			continue
		}
		from, to := filepath.Base(fset.File(id.Pos()).Name()), filepath.Base(fset.File(fn.Pos()).Name())
		if from == to {
			continue
		}
		if uses[from] == nil {
			uses[from] = map[string][]string{}
		}
		if name := fn.Name(); !slices.Contains(uses[from][to], name) {
			uses[from][to] = append(uses[from][to], name)
			slices.Sort(uses[from][to])
		}
	}
	return uses
}

// fileCycles returns one cycle of files for each strongly connected group
// of two or more files (Tarjan's algorithm), each cycle as a path.
func fileCycles(uses map[string]map[string][]string) [][]string {
	var nodes []string
	for f, to := range uses {
		nodes = append(nodes, f)
		for g := range to {
			nodes = append(nodes, g)
		}
	}
	slices.Sort(nodes)
	nodes = slices.Compact(nodes)
	index, low, on := map[string]int{}, map[string]int{}, map[string]bool{}
	var stack []string
	var groups [][]string
	var visit func(string)
	visit = func(v string) {
		index[v], low[v] = len(index), len(index)
		stack = append(stack, v)
		on[v] = true
		for _, w := range slices.Sorted(mapKeys(uses[v])) {
			if _, seen := index[w]; !seen {
				visit(w)
				low[v] = min(low[v], low[w])
			} else if on[w] {
				low[v] = min(low[v], index[w])
			}
		}
		if low[v] == index[v] {
			var group []string
			for {
				w := stack[len(stack)-1]
				stack = stack[:len(stack)-1]
				on[w] = false
				group = append(group, w)
				if w == v {
					break
				}
			}
			if len(group) > 1 {
				groups = append(groups, group)
			}
		}
	}
	for _, v := range nodes {
		if _, seen := index[v]; !seen {
			visit(v)
		}
	}
	var cycles [][]string
	for _, g := range groups {
		cycles = append(cycles, cycleWithin(uses, g))
	}
	return cycles
}

// cycleWithin finds a path from the group's first file back to itself
// through files of the group.
func cycleWithin(uses map[string]map[string][]string, group []string) []string {
	slices.Sort(group)
	in := map[string]bool{}
	for _, f := range group {
		in[f] = true
	}
	start := group[0]
	prev := map[string]string{}
	queue := []string{start}
	for len(queue) > 0 {
		v := queue[0]
		queue = queue[1:]
		for _, w := range slices.Sorted(mapKeys(uses[v])) {
			if !in[w] {
				continue
			}
			if w == start {
				path := []string{v}
				for path[0] != start {
					path = append([]string{prev[path[0]]}, path...)
				}
				return path
			}
			if _, seen := prev[w]; !seen {
				prev[w] = v
				queue = append(queue, w)
			}
		}
	}
	return group
}

func mapKeys[V any](m map[string]V) func(func(string) bool) {
	return func(yield func(string) bool) {
		for k := range m {
			if !yield(k) {
				return
			}
		}
	}
}
