package gate_test

import (
	"context"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/nodeward/nodeward/api/v1alpha1"
	"github.com/nodeward/nodeward/gate"
	"github.com/nodeward/nodeward/test/cluster"
)

// Every way of not getting an answer holds grants, with the reason saying
// which; none of these needs a real Prometheus, only something that is not
// one.

func TestNilGatesPass(t *testing.T) {
	t.Parallel()
	expect(t, gate.NewEvaluator(nil).Evaluate(context.Background(), nil), gate.ReasonPassing)
}

// closedPort is a loopback URL nothing listens on.
func closedPort(t *testing.T) string {
	ports, err := cluster.FreePorts(1)
	if err != nil {
		t.Fatal(err)
	}
	return fmt.Sprintf("http://127.0.0.1:%d", ports[0])
}

func TestUnreachablePrometheusFailsClosed(t *testing.T) {
	t.Parallel()
	ev := gate.NewEvaluator(nil)
	for name, url := range map[string]string{
		"ConnectionRefused": closedPort(t),
		"NoSuchHost":        "http://nodeward-gate-test.invalid:9090",
	} {
		t.Run(name, func(t *testing.T) {
			t.Parallel()
			withAlerts := &v1alpha1.Gates{Prometheus: url, Alerts: &metav1.LabelSelector{}, Timeout: "10s"}
			expect(t, ev.Evaluate(context.Background(), withAlerts), gate.ReasonPrometheusUnreachable, url, "fetch the alerts")
			onlyQueries := &v1alpha1.Gates{Prometheus: url, Queries: []v1alpha1.GateQuery{{Name: "q", Query: "vector(1)"}}, Timeout: "10s"}
			expect(t, ev.Evaluate(context.Background(), onlyQueries), gate.ReasonPrometheusUnreachable, url, `query "q"`)
		})
	}
}

func TestHangingDialIsUnreachable(t *testing.T) {
	t.Parallel()
	// A dial that never completes, as to an address that drops SYNs.
	client := &http.Client{Transport: &http.Transport{
		DialContext: func(ctx context.Context, _, _ string) (net.Conn, error) {
			<-ctx.Done()
			return nil, ctx.Err()
		},
	}}
	gates := &v1alpha1.Gates{Prometheus: "http://prometheus.example:9090", Alerts: &metav1.LabelSelector{}, Timeout: "200ms"}
	v := gate.NewEvaluator(client).Evaluate(context.Background(), gates)
	expect(t, v, gate.ReasonPrometheusUnreachable, "no connection within the gates' timeout of 200ms")
}

// server is an httptest server answering every request with handler.
func server(t *testing.T, handler http.HandlerFunc) string {
	srv := httptest.NewServer(handler)
	t.Cleanup(srv.Close)
	return srv.URL
}

// hang answers nothing until the client gives up. It reads the body first:
// the server notices a client gone (and ends r.Context()) only once the
// body is read, and queries are POSTs.
func hang(w http.ResponseWriter, r *http.Request) {
	_, _ = io.Copy(io.Discard, r.Body)
	<-r.Context().Done()
}

func TestSlowPrometheusTimesOut(t *testing.T) {
	t.Parallel()
	url := server(t, hang)
	ev := gate.NewEvaluator(nil)
	for name, gates := range map[string]*v1alpha1.Gates{
		"Alerts":  {Prometheus: url, Alerts: &metav1.LabelSelector{}, Timeout: "300ms"},
		"Queries": {Prometheus: url, Queries: []v1alpha1.GateQuery{{Name: "q", Query: "vector(1)"}}, Timeout: "300ms"},
	} {
		t.Run(name, func(t *testing.T) {
			t.Parallel()
			start := time.Now()
			v := ev.Evaluate(context.Background(), gates)
			expect(t, v, gate.ReasonQueryFailed, url, "no answer within the gates' timeout of 300ms")
			if took := time.Since(start); took > 5*time.Second {
				t.Errorf("evaluation took %s with a timeout of 300ms", took)
			}
		})
	}
}

func TestCallerCancelFailsClosed(t *testing.T) {
	t.Parallel()
	url := server(t, hang)
	ctx, cancel := context.WithCancel(context.Background())
	time.AfterFunc(100*time.Millisecond, cancel)
	v := gate.NewEvaluator(nil).Evaluate(ctx, &v1alpha1.Gates{Prometheus: url, Alerts: &metav1.LabelSelector{}})
	expect(t, v, gate.ReasonQueryFailed, "canceled")
}

func TestBrokenResponsesFailClosed(t *testing.T) {
	t.Parallel()
	ev := gate.NewEvaluator(nil)
	for _, tc := range []struct {
		name    string
		status  int
		body    string
		reason  string
		message string
	}{
		{"ServerError", http.StatusInternalServerError, "boom", gate.ReasonQueryFailed, "server_error"},
		{"ServiceUnavailable", http.StatusServiceUnavailable, "Service Unavailable", gate.ReasonQueryFailed, "503"},
		{"NotPrometheus", http.StatusNotFound, "404 page not found", gate.ReasonQueryFailed, "404"},
		{"NotJSON", http.StatusOK, "<html>hello</html>", gate.ReasonQueryFailed, "bad_response"},
		{"ErrorInSuccess", http.StatusOK, `{"status":"error","errorType":"execution","error":"oops"}`, gate.ReasonQueryFailed, "oops"},
		{"BadDataOn422", http.StatusUnprocessableEntity, `{"status":"error","errorType":"bad_data","error":"nope"}`, gate.ReasonQueryInvalid, "nope"},
		{"NoResult", http.StatusOK, `{"status":"success","data":{"resultType":"vector","result":[]}}`, gate.ReasonQueryEmpty, "no samples"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			url := server(t, func(w http.ResponseWriter, r *http.Request) {
				w.WriteHeader(tc.status)
				fmt.Fprint(w, tc.body)
			})
			gates := &v1alpha1.Gates{Prometheus: url, Queries: []v1alpha1.GateQuery{{Name: "q", Query: "vector(1)"}}}
			expect(t, ev.Evaluate(context.Background(), gates), tc.reason, tc.message)
		})
	}
	t.Run("AlertsServerError", func(t *testing.T) {
		t.Parallel()
		url := server(t, func(w http.ResponseWriter, r *http.Request) { w.WriteHeader(http.StatusBadGateway) })
		gates := &v1alpha1.Gates{Prometheus: url, Alerts: &metav1.LabelSelector{}}
		expect(t, ev.Evaluate(context.Background(), gates), gate.ReasonQueryFailed, "fetch the alerts", url, "502")
	})
}

func TestInvalidGatesAskNothing(t *testing.T) {
	t.Parallel()
	var asked atomic.Int32
	url := server(t, func(w http.ResponseWriter, r *http.Request) { asked.Add(1) })
	v := gate.NewEvaluator(nil).Evaluate(context.Background(), &v1alpha1.Gates{
		Prometheus: url, Alerts: &metav1.LabelSelector{},
		Queries: []v1alpha1.GateQuery{{Name: "q", Query: "vector(1)", Min: str("one")}},
	})
	expect(t, v, gate.ReasonGateInvalid, `gates.queries[0].min "one": not a decimal number`)
	if n := asked.Load(); n != 0 {
		t.Errorf("Prometheus asked %d times for invalid gates", n)
	}
}

func TestCredentialsStayOutOfMessages(t *testing.T) {
	t.Parallel()
	url := closedPort(t)
	withUser := "http://gate:s3cret@" + url[len("http://"):]
	v := gate.NewEvaluator(nil).Evaluate(context.Background(), &v1alpha1.Gates{Prometheus: withUser, Alerts: &metav1.LabelSelector{}})
	expect(t, v, gate.ReasonPrometheusUnreachable, "gate:xxxxx@")
	if strings.Contains(v.Message, "s3cret") {
		t.Errorf("message %q shows the password", v.Message)
	}
}

func TestValidate(t *testing.T) {
	t.Parallel()
	good := func() *v1alpha1.Gates {
		return &v1alpha1.Gates{
			Prometheus: "http://prometheus.monitoring.svc:9090/prom",
			Alerts:     &metav1.LabelSelector{MatchLabels: map[string]string{"severity": "critical"}},
			Queries: []v1alpha1.GateQuery{
				{Name: "ready", Query: "min(kube_node_status_condition)", Min: str("0.95"), Max: str("1")},
				{Name: "errors", Query: "sum(rate(errors_total[5m]))", Max: str("1e3")},
			},
			Timeout: "10s",
		}
	}
	if err := gate.Validate(good()); err != nil {
		t.Fatalf("good gates: %v", err)
	}
	if err := gate.Validate(nil); err != nil {
		t.Fatalf("nil gates: %v", err)
	}
	for _, tc := range []struct {
		name   string
		change func(g *v1alpha1.Gates)
		want   string
	}{
		{"NoURL", func(g *v1alpha1.Gates) { g.Prometheus = "" }, `gates.prometheus "": required`},
		{"NotAURL", func(g *v1alpha1.Gates) { g.Prometheus = "x" }, `gates.prometheus "x": want an http:// or https:// URL`},
		{"BadURL", func(g *v1alpha1.Gates) { g.Prometheus = "http://a b/" }, `gates.prometheus "http://a b/": `},
		{"NoHost", func(g *v1alpha1.Gates) { g.Prometheus = "http:///api" }, `gates.prometheus "http:///api": no host`},
		{"Query", func(g *v1alpha1.Gates) { g.Prometheus = "http://p:9090/?x=1" }, `gates.prometheus "http://p:9090/?x=1": want a base URL`},
		{"Selector", func(g *v1alpha1.Gates) {
			g.Alerts = &metav1.LabelSelector{MatchExpressions: []metav1.LabelSelectorRequirement{{Key: "a", Operator: "Near"}}}
		}, `gates.alerts: `},
		{"Timeout", func(g *v1alpha1.Gates) { g.Timeout = "5" }, `gates.timeout "5": not a Go duration`},
		{"NegativeTimeout", func(g *v1alpha1.Gates) { g.Timeout = "-1s" }, `gates.timeout "-1s": not positive`},
		{"NoName", func(g *v1alpha1.Gates) { g.Queries[1].Name = "" }, `gates.queries[1].name: required`},
		{"DuplicateName", func(g *v1alpha1.Gates) { g.Queries[1].Name = "ready" }, `gates.queries[1].name "ready": already the name of gates.queries[0]`},
		{"NoQuery", func(g *v1alpha1.Gates) { g.Queries[0].Query = " " }, `gates.queries[0].query: required`},
		{"Min", func(g *v1alpha1.Gates) { g.Queries[1].Min = str("abc") }, `gates.queries[1].min "abc": not a decimal number`},
		{"MaxNaN", func(g *v1alpha1.Gates) { g.Queries[0].Max = str("NaN") }, `gates.queries[0].max "NaN": not a decimal number`},
		{"MaxInf", func(g *v1alpha1.Gates) { g.Queries[0].Max = str("+Inf") }, `gates.queries[0].max "+Inf": not a decimal number`},
		{"MaxHex", func(g *v1alpha1.Gates) { g.Queries[0].Max = str("0x10") }, `gates.queries[0].max "0x10": not a decimal number`},
		{"MaxHuge", func(g *v1alpha1.Gates) { g.Queries[0].Max = str("1e999") }, `gates.queries[0].max "1e999": not a decimal number`},
		{"MinAboveMax", func(g *v1alpha1.Gates) { g.Queries[0].Min = str("2") }, `gates.queries[0]: min 2 is above max 1`},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			g := good()
			tc.change(g)
			err := gate.Validate(g)
			if err == nil || !strings.HasPrefix(err.Error(), tc.want) {
				t.Fatalf("Validate: %v, want an error starting %q", err, tc.want)
			}
		})
	}
}

// TestObjectGatesOnlyAskNoPrometheus: gates with neither Prometheus nor
// alerts or queries (object gates only) are valid and pass here; alerts
// without Prometheus are not.
func TestObjectGatesOnlyAskNoPrometheus(t *testing.T) {
	objectsOnly := &v1alpha1.Gates{Objects: []v1alpha1.ObjectGate{{Version: "v1", Resource: "configmaps", Expression: "true"}}}
	if v := gate.NewEvaluator(nil).Evaluate(context.Background(), objectsOnly); !v.Passing || v.Message != "no Prometheus gates" {
		t.Errorf("object gates only: %+v, want passing with no Prometheus gates", v)
	}
	withAlerts := *objectsOnly
	withAlerts.Alerts = &metav1.LabelSelector{}
	if err := gate.Validate(&withAlerts); err == nil || !strings.Contains(err.Error(), `gates.prometheus "": required`) {
		t.Errorf("Validate(alerts without Prometheus) = %v, want gates.prometheus required", err)
	}
}
