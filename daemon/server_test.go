package daemon

import (
	"testing"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/nodeward/nodeward/api/kube"
)

// TestTextfileKeepsOnlyNodewardMetrics: node_exporter exposes its own go_*
// and process_*; the textfile must not repeat them.
func TestTextfileKeepsOnlyNodewardMetrics(t *testing.T) {
	reg := prometheus.NewRegistry()
	if err := kube.RegisterRuntimeMetrics(reg, kube.BuildInfo{}); err != nil {
		t.Fatal(err)
	}
	families, err := nodewardOnly(reg).Gather()
	if err != nil {
		t.Fatal(err)
	}
	if len(families) != 1 || families[0].GetName() != "nodeward_build_info" {
		var names []string
		for _, f := range families {
			names = append(names, f.GetName())
		}
		t.Fatalf("textfile families %v, want only nodeward_build_info", names)
	}
}
