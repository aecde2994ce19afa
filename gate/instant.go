package gate

import (
	"context"
	"fmt"
	"time"

	"github.com/prometheus/client_golang/api"
	promv1 "github.com/prometheus/client_golang/api/prometheus/v1"
	"github.com/prometheus/common/model"
)

// QueryError is why Instant got no result: Reason is one of the Reason
// constants a gate would give for the same failure (PrometheusUnreachable,
// QueryInvalid, QueryFailed, or GateInvalid for a bad Prometheus URL), and
// Message names the query and the Prometheus, its password redacted.
type QueryError struct {
	Reason  string
	Message string
}

func (e *QueryError) Error() string { return e.Message }

// Instant runs expr as one instant query at the Prometheus whose base URL
// is prometheus, bounded by limit as well as by ctx, and returns the result
// as Prometheus's client decodes it (a vector, a scalar or a matrix), for
// callers that judge the samples by rules of their own (package
// updaterisk). Failures are classified as the gates classify theirs, so
// that one client, one redaction and one notion of "unreachable" serve
// both; the error is a *QueryError.
func (e *Evaluator) Instant(ctx context.Context, prometheus, expr string, limit time.Duration) (model.Value, error) {
	base, err := prometheusURL(prometheus)
	if err != nil {
		return nil, &QueryError{Reason: ReasonGateInvalid, Message: fmt.Sprintf("prometheus %q: %v", prometheus, err)}
	}
	if limit <= 0 {
		limit = DefaultTimeout
	}
	ctx, cancel := context.WithTimeout(ctx, limit)
	defer cancel()
	client, err := api.NewClient(api.Config{Address: prometheus, Client: e.client})
	if err != nil {
		return nil, &QueryError{Reason: ReasonGateInvalid, Message: fmt.Sprintf("prometheus %q: %v", base.Redacted(), err)}
	}
	c := check{prom: promv1.NewAPI(client), url: base.Redacted(), timeout: limit}
	// The zero time leaves "now" to Prometheus, as for the gates' queries
	// (query.go says why).
	tctx, connected := traced(ctx)
	value, _, _, err := c.prom.Query(tctx, expr, time.Time{})
	if err != nil {
		v := c.failed(ctx, fmt.Sprintf("run query %q", expr), err, connected.Load())
		return nil, &QueryError{Reason: v.Reason, Message: v.Message}
	}
	return value, nil
}
