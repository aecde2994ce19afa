package gate_test

import (
	"context"
	"errors"
	"strings"
	"testing"
	"time"

	"github.com/nodeward/nodeward/gate"
)

// TestInstantFailsWithTheGatesReasons: Instant's failures carry the reason
// a gate gives for the same failure, and ask nothing of a bad URL.
func TestInstantFailsWithTheGatesReasons(t *testing.T) {
	t.Parallel()
	ev := gate.NewEvaluator(nil)
	for _, tc := range []struct {
		name, url, reason, message string
	}{
		{"Unreachable", closedPort(t), gate.ReasonPrometheusUnreachable, `run query "vector(1)" at Prometheus`},
		{"BadURL", "prometheus:9090", gate.ReasonGateInvalid, `prometheus "prometheus:9090": want an http:// or https:// URL`},
		{"Slow", server(t, hang), gate.ReasonQueryFailed, "no answer within the gates' timeout of 300ms"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			value, err := ev.Instant(context.Background(), tc.url, "vector(1)", 300*time.Millisecond)
			var qerr *gate.QueryError
			if !errors.As(err, &qerr) || qerr.Reason != tc.reason || !strings.Contains(qerr.Message, tc.message) {
				t.Fatalf("Instant = %v, %v; want a QueryError %s containing %q", value, err, tc.reason, tc.message)
			}
		})
	}
}
