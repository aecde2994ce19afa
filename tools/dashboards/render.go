package main

import (
	"bytes"
	"encoding/json"
	"fmt"
	"path"
	"strings"
)

// Where the generated files go, relative to the repository root. The
// kustomize trees and the chart each read their own copy (kustomize loads
// files only under its kustomization's directory; Helm only the chart's
// files), all written here from one model.
var (
	grafanaDirs = []string{"manifests/components/monitoring/dashboards", "charts/nodeward/dashboards/grafana"}
	consoleDirs = []string{"manifests/overlays/openshift/dashboards", "charts/nodeward/dashboards/console"}
)

// consolePanelTypes maps the SDK's panel types to those the OpenShift
// console's monitoring dashboards draw: it renders only graph, singlestat,
// gauge, table and grafana-piechart-panel (and rows), and skips any
// other panel silently.
var consolePanelTypes = map[string]string{
	"timeseries": "graph",
	"stat":       "singlestat",
	"table":      "table",
}

// consoleRateInterval stands for $__rate_interval in the console, which
// substitutes Grafana's interval variables only partly; the default
// in-cluster scrape interval is 30 s, and 5m covers several scrapes.
const consoleRateInterval = "5m"

// generate renders every generated file: path → content.
func generate() (map[string][]byte, error) {
	files := map[string][]byte{}
	for _, b := range boards() {
		d, err := build(b)
		if err != nil {
			return nil, fmt.Errorf("build dashboard %s: %w", b.uid, err)
		}
		grafana, err := marshal(d)
		if err != nil {
			return nil, fmt.Errorf("encode dashboard %s: %w", b.uid, err)
		}
		console, err := consoleVariant(grafana)
		if err != nil {
			return nil, fmt.Errorf("console variant of %s: %w", b.uid, err)
		}
		for _, dir := range grafanaDirs {
			files[path.Join(dir, b.file)] = grafana
		}
		for _, dir := range consoleDirs {
			files[path.Join(dir, b.file)] = console
		}
	}
	return files, nil
}

// marshal is the checked-in form: indented, one trailing newline.
func marshal(v any) ([]byte, error) {
	var buf bytes.Buffer
	enc := json.NewEncoder(&buf)
	enc.SetIndent("", "  ")
	enc.SetEscapeHTML(false)
	if err := enc.Encode(v); err != nil {
		return nil, err
	}
	return buf.Bytes(), nil
}

// consoleVariant rewrites a Grafana dashboard for the OpenShift console:
// its panel types, its units and legends where the console reads them
// (yaxes, legend.show), no data source (the console queries the cluster's
// own monitoring stack, and a panel naming one is read as a custom data
// source), and no panel or variable on the coordinator's metrics (on
// OpenShift the Machine Config Operator coordinates; nodeward's
// coordinator does not run).
func consoleVariant(grafana []byte) ([]byte, error) {
	var d map[string]any
	if err := json.Unmarshal(grafana, &d); err != nil {
		return nil, err
	}
	var panels []any
	for _, p := range d["panels"].([]any) {
		panel := p.(map[string]any)
		if onCoordinator(panel["targets"]) {
			continue
		}
		if err := consolePanel(panel); err != nil {
			return nil, err
		}
		panels = append(panels, panel)
	}
	d["panels"] = panels
	templating := d["templating"].(map[string]any)
	var vars []any
	for _, v := range templating["list"].([]any) {
		variable := v.(map[string]any)
		if variable["type"] == "datasource" || strings.Contains(fmt.Sprint(variable["definition"]), coordinator) {
			continue
		}
		delete(variable, "datasource")
		vars = append(vars, variable)
	}
	templating["list"] = vars
	return marshal(d)
}

// onCoordinator: a panel's queries read the coordinator's metrics.
func onCoordinator(targets any) bool {
	for _, t := range targets.([]any) {
		if strings.Contains(t.(map[string]any)["expr"].(string), coordinator) {
			return true
		}
	}
	return false
}

// consolePanel rewrites one panel in place.
func consolePanel(panel map[string]any) error {
	typ, ok := consolePanelTypes[panel["type"].(string)]
	if !ok {
		return fmt.Errorf("panel %v: the console has no panel type for %v", panel["title"], panel["type"])
	}
	panel["type"] = typ
	delete(panel, "datasource")
	unit := "none"
	if fc, ok := panel["fieldConfig"].(map[string]any); ok {
		if u, ok := fc["defaults"].(map[string]any)["unit"].(string); ok {
			unit = u
		}
	}
	switch typ {
	case "graph":
		panel["yaxes"] = []any{map[string]any{"format": unit, "min": 0, "show": true}, map[string]any{"format": "short", "show": false}}
		panel["legend"] = map[string]any{"show": true}
	case "singlestat":
		panel["format"] = unit
	}
	for _, t := range panel["targets"].([]any) {
		target := t.(map[string]any)
		delete(target, "datasource")
		target["expr"] = strings.ReplaceAll(target["expr"].(string), "$__rate_interval", consoleRateInterval)
	}
	return nil
}
