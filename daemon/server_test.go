package daemon

import (
	"crypto/tls"
	"net/http"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/nodeward/nodeward/api/kube"
	"github.com/nodeward/nodeward/test/cluster"
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

// TestMetricsAuthKubernetes: with metricsAuth kubernetes the agent serves
// TLS, refuses /metrics without a token and answers the kubelet's probes
// without one. The reviews themselves are tested in api/kube/metricsauth.
func TestMetricsAuthKubernetes(t *testing.T) {
	t.Parallel()
	cp := env.ControlPlane(t)
	ensureLeaseNamespace(t, cp.Client())
	node := cp.CreateNodes(t, cluster.NodeSpec{Prefix: "metricsauth", Count: 1})[0]
	cfg := fixtureConfig(newFixtureHost(t).root)
	cfg.MetricsAuth = "kubernetes"
	a := startHealth(t, cp.Config(), node, cfg, nil)
	client := &http.Client{Timeout: 10 * time.Second, Transport: &http.Transport{
		TLSClientConfig: &tls.Config{InsecureSkipVerify: true}}} //nolint:gosec // the agent's self-signed certificate
	for path, refused := range map[string]bool{"/metrics": true, "/readyz": false, "/livez": false, "/healthz": false} {
		resp, err := client.Get("https://" + a.MetricsAddr() + path)
		if err != nil {
			t.Fatalf("GET %s over TLS: %v", path, err)
		}
		resp.Body.Close()
		if got := resp.StatusCode == http.StatusUnauthorized; got != refused {
			t.Errorf("GET %s without a token: %d (401 expected: %v)", path, resp.StatusCode, refused)
		}
	}
}
