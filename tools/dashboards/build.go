package main

//lint:file-ignore SA1019 the classic dashboard JSON model (schema v1) on purpose: Grafana's dashboard sidecar and file provisioning load it in every Grafana version, and the OpenShift console reads only it; v2 needs Grafana 12's dynamic dashboards.

import (
	"fmt"

	"github.com/grafana/grafana-foundation-sdk/go/cog"
	"github.com/grafana/grafana-foundation-sdk/go/cog/variants"
	"github.com/grafana/grafana-foundation-sdk/go/common"
	"github.com/grafana/grafana-foundation-sdk/go/dashboard"
	"github.com/grafana/grafana-foundation-sdk/go/prometheus"
	"github.com/grafana/grafana-foundation-sdk/go/stat"
	"github.com/grafana/grafana-foundation-sdk/go/table"
	"github.com/grafana/grafana-foundation-sdk/go/timeseries"
)

// datasource is every panel's: the $datasource variable's choice.
func datasource() common.DataSourceRef {
	return common.DataSourceRef{Type: cog.ToPtr("prometheus"), Uid: cog.ToPtr("${datasource}")}
}

// build makes the Grafana dashboard of b with the foundation SDK.
func build(b board) (dashboard.Dashboard, error) {
	d := dashboard.NewDashboardBuilder(b.title).
		Uid(b.uid).
		Description(b.about).
		Tags([]string{"nodeward"}).
		Editable().
		Refresh("30s").
		Time("now-6h", "now").
		Timezone(common.TimeZoneBrowser).
		Tooltip(dashboard.DashboardCursorSyncCrosshair).
		WithVariable(dashboard.NewDatasourceVariableBuilder("datasource").Label("Data source").Type("prometheus"))
	if b.pools {
		d.WithVariable(listVariable("pool", "Pool", `nodeward_pool_nodes{`+coordinator+`}`))
	}
	d.WithVariable(listVariable("node", "Node", b.nodeValues))
	for _, p := range b.panels {
		d.WithPanel(buildPanel(p))
	}
	return d.Build()
}

// listVariable is a multi-value variable of a label's values; All
// matches every value (.*), also those seen after the dashboard loaded.
func listVariable(name, label, metric string) *dashboard.QueryVariableBuilder {
	q := fmt.Sprintf("label_values(%s, %s)", metric, name)
	return dashboard.NewQueryVariableBuilder(name).
		Label(label).
		Datasource(datasource()).
		Query(dashboard.StringOrMap{String: cog.ToPtr(q)}).
		Definition(q).
		Refresh(dashboard.VariableRefreshOnTimeRangeChanged).
		Sort(dashboard.VariableSortAlphabeticalAsc).
		Multi(true).
		IncludeAll(true).
		AllValue(".*")
}

// buildPanel makes one panel of its kind.
func buildPanel(p panel) cog.Builder[dashboard.Panel] {
	targets := make([]cog.Builder[variants.Dataquery], 0, len(p.queries))
	for i, q := range p.queries {
		t := prometheus.NewDataqueryBuilder().
			RefId(string(rune('A' + i))).
			Expr(q.expr).
			LegendFormat(q.legend)
		if p.kind == tableKind {
			t.Instant().Format(prometheus.PromQueryFormatTable)
		}
		targets = append(targets, t)
	}
	switch p.kind {
	case statKind:
		return stat.NewPanelBuilder().Id(p.id).Title(p.title).Description(p.about).Datasource(datasource()).
			Unit(p.unit).Span(p.width).Height(8).Targets(targets)
	case tableKind:
		return table.NewPanelBuilder().Id(p.id).Title(p.title).Description(p.about).Datasource(datasource()).
			Unit(p.unit).Span(p.width).Height(8).Targets(targets).
			Footer(common.NewTableFooterOptionsBuilder().Show(false).Reducer([]string{"sum"}))
	default:
		return timeseries.NewPanelBuilder().Id(p.id).Title(p.title).Description(p.about).Datasource(datasource()).
			Unit(p.unit).Span(p.width).Height(8).Targets(targets).
			Min(0).
			Legend(common.NewVizLegendOptionsBuilder().ShowLegend(true).DisplayMode(common.LegendDisplayModeTable).
				Placement(common.LegendPlacementBottom).Calcs([]string{"lastNotNull", "max"})).
			Tooltip(common.NewVizTooltipOptionsBuilder().Mode(common.TooltipDisplayModeMulti).Sort(common.SortOrderDescending))
	}
}
