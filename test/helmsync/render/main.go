// Command render prints charts/nodeward rendered with Helm's own engine, as
// `helm template nodeward charts/nodeward -n nodeward-system` would, for the
// tests that install the chart on a real node (test/node) without a helm
// binary. Values are given as --set key=value (dotted keys, strings).
package main

import (
	"flag"
	"fmt"
	"os"
	"path/filepath"
	"sort"
	"strings"

	"helm.sh/helm/v3/pkg/chart/loader"
	"helm.sh/helm/v3/pkg/chartutil"
	"helm.sh/helm/v3/pkg/engine"
)

type sets map[string]any

func (s sets) String() string { return fmt.Sprint(map[string]any(s)) }

// Set stores key=value at its dotted path.
func (s sets) Set(kv string) error {
	key, value, ok := strings.Cut(kv, "=")
	if !ok || key == "" {
		return fmt.Errorf("--set %q: want key=value", kv)
	}
	m := map[string]any(s)
	parts := strings.Split(key, ".")
	for _, p := range parts[:len(parts)-1] {
		next, ok := m[p].(map[string]any)
		if !ok {
			next = map[string]any{}
			m[p] = next
		}
		m = next
	}
	m[parts[len(parts)-1]] = value
	return nil
}

func main() {
	values := sets{}
	chartDir := flag.String("chart", filepath.Join("..", "..", "charts", "nodeward"), "the chart's directory")
	flag.Var(values, "set", "a value, key=value with a dotted key (repeatable)")
	flag.Parse()
	if err := render(*chartDir, values); err != nil {
		fmt.Fprintln(os.Stderr, "render:", err)
		os.Exit(1)
	}
}

func render(dir string, values map[string]any) error {
	chart, err := loader.Load(dir)
	if err != nil {
		return fmt.Errorf("load chart %s: %w", dir, err)
	}
	vals, err := chartutil.ToRenderValues(chart, values,
		chartutil.ReleaseOptions{Name: "nodeward", Namespace: "nodeward-system", IsInstall: true}, chartutil.DefaultCapabilities)
	if err != nil {
		return fmt.Errorf("values: %w", err)
	}
	rendered, err := engine.Render(chart, vals)
	if err != nil {
		return fmt.Errorf("render chart: %w", err)
	}
	names := make([]string, 0, len(rendered))
	for n := range rendered {
		if strings.HasSuffix(n, ".yaml") && strings.TrimSpace(rendered[n]) != "" {
			names = append(names, n)
		}
	}
	sort.Strings(names)
	for _, n := range names {
		fmt.Printf("---\n# Source: %s\n%s\n", n, strings.TrimSpace(rendered[n]))
	}
	return nil
}
