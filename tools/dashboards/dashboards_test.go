package main

//lint:file-ignore SA1019 the classic dashboard JSON model (schema v1) on purpose: Grafana's dashboard sidecar and file provisioning load it in every Grafana version, and the OpenShift console reads only it; v2 needs Grafana 12's dynamic dashboards.

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"path"
	"path/filepath"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"testing"

	"github.com/grafana/grafana-foundation-sdk/go/cog"
	"github.com/grafana/grafana-foundation-sdk/go/cog/plugins"
	"github.com/grafana/grafana-foundation-sdk/go/dashboard"
)

// root is the repository root, from this package's directory.
const root = "../.."

// TestCheckedInFilesAreGenerated: every generated file is checked in as
// the generator writes it, and the generated directories hold nothing
// else, so that no dashboard is maintained by hand.
func TestCheckedInFilesAreGenerated(t *testing.T) {
	files, err := generate()
	if err != nil {
		t.Fatal(err)
	}
	for p, want := range files {
		got, err := os.ReadFile(filepath.Join(root, p))
		if err != nil || !bytes.Equal(got, want) {
			t.Errorf("%s differs from the generator's output (err %v): run `make dashboards`", p, err)
		}
	}
	for _, dir := range append(slices.Clone(grafanaDirs), consoleDirs...) {
		entries, err := os.ReadDir(filepath.Join(root, dir))
		if err != nil {
			t.Fatal(err)
		}
		for _, e := range entries {
			if _, ok := files[path.Join(dir, e.Name())]; !ok && strings.HasSuffix(e.Name(), ".json") {
				t.Errorf("%s/%s is not generated: remove it or add it to the model", dir, e.Name())
			}
		}
	}
}

// TestDashboardsDecodeWithTheSDK: the checked-in Grafana dashboards
// decode strictly into the SDK's types and pass its validation; panel ids
// are unique and every panel has queries.
func TestDashboardsDecodeWithTheSDK(t *testing.T) {
	plugins.RegisterDefaultPlugins()
	for _, b := range boards() {
		raw, err := os.ReadFile(filepath.Join(root, grafanaDirs[0], b.file))
		if err != nil {
			t.Fatal(err)
		}
		var d dashboard.Dashboard
		if err := sdkError(d.UnmarshalJSONStrict(raw)); err != nil {
			t.Fatalf("%s: strict decode: %v", b.file, err)
		}
		if err := sdkError(d.Validate()); err != nil {
			t.Errorf("%s: %v", b.file, err)
		}
		if d.Uid == nil || *d.Uid != b.uid {
			t.Errorf("%s: uid %v, want %s", b.file, d.Uid, b.uid)
		}
		// The SDK's strict decode of a dashboard drops the panels it
		// decoded (v0.0.22: a panel's decode returns an empty error that
		// PanelOrRowPanel takes for a failure), so each panel is decoded
		// strictly on its own.
		var raws struct {
			Panels []json.RawMessage `json:"panels"`
		}
		if err := json.Unmarshal(raw, &raws); err != nil {
			t.Fatal(err)
		}
		if len(raws.Panels) != len(b.panels) {
			t.Errorf("%s: %d panels, the model has %d", b.file, len(raws.Panels), len(b.panels))
		}
		ids := map[uint32]bool{}
		for i, r := range raws.Panels {
			var p dashboard.Panel
			if err := sdkError(p.UnmarshalJSONStrict(r)); err != nil {
				t.Fatalf("%s: panel %d: strict decode: %v", b.file, i, err)
			}
			if err := sdkError(p.Validate()); err != nil {
				t.Errorf("%s: panel %d: %v", b.file, i, err)
			}
			if p.Id == nil || ids[*p.Id] {
				t.Errorf("%s: panel %d: id missing or used twice (%v)", b.file, i, p.Id)
				continue
			}
			ids[*p.Id] = true
			if len(p.Targets) == 0 {
				t.Errorf("%s: panel %d has no query", b.file, *p.Id)
			}
		}
	}
}

// sdkError is err, or nil for the empty cog.BuildErrors that the SDK
// (v0.0.22) returns as a non-nil error when a panel decodes cleanly.
func sdkError(err error) error {
	var errs cog.BuildErrors
	if errors.As(err, &errs) && len(errs) == 0 {
		return nil
	}
	return err
}

// TestConsoleVariantsDrawInTheConsole: the console's dashboards use only
// the panel types the console draws, no data source and no Grafana-only
// interval variable; each keeps its panels' ids.
func TestConsoleVariantsDrawInTheConsole(t *testing.T) {
	drawn := []string{"graph", "singlestat", "gauge", "table", "grafana-piechart-panel", "row"}
	for _, b := range boards() {
		raw, err := os.ReadFile(filepath.Join(root, consoleDirs[0], b.file))
		if err != nil {
			t.Fatal(err)
		}
		var d struct {
			UID    string `json:"uid"`
			Panels []struct {
				ID         uint32 `json:"id"`
				Type       string `json:"type"`
				Datasource any    `json:"datasource"`
				Targets    []struct {
					Expr string `json:"expr"`
				} `json:"targets"`
			} `json:"panels"`
		}
		if err := json.Unmarshal(raw, &d); err != nil {
			t.Fatal(err)
		}
		if d.UID != b.uid || len(d.Panels) == 0 {
			t.Errorf("%s: uid %q with %d panels", b.file, d.UID, len(d.Panels))
		}
		for _, p := range d.Panels {
			if !slices.Contains(drawn, p.Type) || p.Datasource != nil {
				t.Errorf("%s: panel %d: type %q, data source %v", b.file, p.ID, p.Type, p.Datasource)
			}
			for _, q := range p.Targets {
				if strings.Contains(q.Expr, "$__") || strings.Contains(q.Expr, coordinator) {
					t.Errorf("%s: panel %d: %s", b.file, p.ID, q.Expr)
				}
			}
		}
	}
}

// panelLink is a runbook's link to a panel: /d/<uid>?viewPanel=<id>.
var panelLink = regexp.MustCompile(`/d/([a-z0-9-]+)\?viewPanel=(\d+)`)

// TestEveryRunbookLinksAPanel: each alert of the PrometheusRules has a
// runbook section in docs/runbooks.md that links, in Grafana's
// /d/<uid>?viewPanel=<id> form, a panel that exists.
func TestEveryRunbookLinksAPanel(t *testing.T) {
	rules, err := os.ReadFile(filepath.Join(root, "manifests/components/monitoring/prometheusrule.yaml"))
	if err != nil {
		t.Fatal(err)
	}
	runbooks, err := os.ReadFile(filepath.Join(root, "docs/runbooks.md"))
	if err != nil {
		t.Fatal(err)
	}
	panels := map[string]bool{}
	for _, b := range boards() {
		for _, p := range b.panels {
			panels[fmt.Sprintf("%s/%d", b.uid, p.id)] = true
		}
	}
	alerts := regexp.MustCompile(`(?m)^\s*- alert: (\w+)`).FindAllStringSubmatch(string(rules), -1)
	if len(alerts) == 0 {
		t.Fatal("no alert found in prometheusrule.yaml")
	}
	sections := runbookSections(string(runbooks))
	for _, a := range alerts {
		text, ok := sections[a[1]]
		if !ok {
			t.Errorf("alert %s has no runbook section in docs/runbooks.md", a[1])
			continue
		}
		links := panelLink.FindAllStringSubmatch(text, -1)
		if len(links) == 0 {
			t.Errorf("the runbook of %s links no panel (/d/<uid>?viewPanel=<id>)", a[1])
		}
		for _, l := range links {
			if id, _ := strconv.Atoi(l[2]); !panels[fmt.Sprintf("%s/%d", l[1], id)] {
				t.Errorf("the runbook of %s links %s: no such dashboard panel", a[1], l[0])
			}
		}
	}
}

// runbookSections splits the runbooks by their "## Name" headings.
func runbookSections(md string) map[string]string {
	out := map[string]string{}
	var name string
	for line := range strings.Lines(md) {
		if h, ok := strings.CutPrefix(line, "## "); ok {
			name = strings.TrimSpace(h)
			continue
		}
		if name != "" {
			out[name] += line
		}
	}
	return out
}
