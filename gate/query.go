package gate

import (
	"context"
	"errors"
	"fmt"
	"math"
	"net"
	"net/http/httptrace"
	"net/url"
	"sort"
	"strconv"
	"strings"
	"sync/atomic"
	"time"

	promv1 "github.com/prometheus/client_golang/api/prometheus/v1"
	"github.com/prometheus/common/model"

	"github.com/nodeward/nodeward/api/v1alpha1"
)

// query runs one GateQuery as an instant query and checks its samples.
func (c check) query(ctx context.Context, q v1alpha1.GateQuery) Verdict {
	lo, hi, err := bounds(q)
	if err != nil { // checked by Validate
		return Verdict{Reason: ReasonGateInvalid, Message: fmt.Sprintf("gates.queries %q: %v", q.Name, err)}
	}
	what := fmt.Sprintf("query %q (%s)", q.Name, q.Query)
	// The zero time leaves "now" to Prometheus: a coordinator whose clock
	// is ahead of Prometheus's by more than the lookback delta would find
	// no samples at its own now.
	tctx, connected := traced(ctx)
	value, _, _, err := c.prom.Query(tctx, q.Query, time.Time{})
	if err != nil {
		return c.failed(ctx, "run "+what, err, connected.Load())
	}
	bounded := q.Min != nil || q.Max != nil
	out := func(v model.SampleValue) bool {
		f := float64(v)
		return bounded && (math.IsNaN(f) || f < lo || f > hi)
	}
	switch v := value.(type) {
	case model.Vector:
		if len(v) == 0 {
			return Verdict{Reason: ReasonQueryEmpty, Message: fmt.Sprintf("%s returned no samples at Prometheus %s", what, c.url)}
		}
		var bad []*model.Sample
		for _, s := range v {
			if out(s.Value) {
				bad = append(bad, s)
			}
		}
		if len(bad) == 0 {
			return Verdict{Passing: true, Reason: ReasonPassing}
		}
		// Prometheus orders a vector as it likes; name the same sample on
		// every evaluation.
		sort.Slice(bad, func(i, j int) bool { return bad[i].Metric.String() < bad[j].Metric.String() })
		msg := fmt.Sprintf("%s: %s = %s, %s", what, bad[0].Metric, formatValue(bad[0].Value), boundsText(q))
		if n := len(bad) - 1; n > 0 {
			msg += fmt.Sprintf(" (and %d more of %d samples out of bounds)", n, len(v))
		}
		return Verdict{Reason: ReasonQueryOutOfBounds, Message: msg + " at Prometheus " + c.url}
	case *model.Scalar:
		if out(v.Value) {
			return Verdict{Reason: ReasonQueryOutOfBounds, Message: fmt.Sprintf("%s: scalar %s, %s at Prometheus %s",
				what, formatValue(v.Value), boundsText(q), c.url)}
		}
		return Verdict{Passing: true, Reason: ReasonPassing}
	default:
		// A string or a range vector has no sample to bound: the query is
		// not a gate.
		kind := "no result"
		if value != nil {
			kind = "a " + value.Type().String()
		}
		return Verdict{Reason: ReasonQueryInvalid, Message: fmt.Sprintf("%s returned %s, want an instant vector or a scalar, at Prometheus %s", what, kind, c.url)}
	}
}

func formatValue(v model.SampleValue) string {
	return strconv.FormatFloat(float64(v), 'g', -1, 64)
}

// boundsText says what the value should have been, as the spec wrote it.
func boundsText(q v1alpha1.GateQuery) string {
	switch {
	case q.Min != nil && q.Max != nil:
		return fmt.Sprintf("want between %s and %s", *q.Min, *q.Max)
	case q.Min != nil:
		return fmt.Sprintf("want at least %s", *q.Min)
	default:
		return fmt.Sprintf("want at most %s", *q.Max)
	}
}

// traced returns ctx with a trace that records whether the request got a
// connection to Prometheus: the one sure way to tell an unreachable
// Prometheus from a slow one once the deadline has passed, since the
// transport reports a dial cut short by ctx as ctx's error alone.
func traced(ctx context.Context) (context.Context, *atomic.Bool) {
	connected := new(atomic.Bool)
	return httptrace.WithClientTrace(ctx, &httptrace.ClientTrace{
		GotConn: func(httptrace.GotConnInfo) { connected.Store(true) },
	}), connected
}

// failed turns an error of the Prometheus client into a verdict: no
// connection is PrometheusUnreachable, Prometheus rejecting a query's
// data (bad PromQL) is QueryInvalid, anything else QueryFailed.
//
// The client returns *promv1.Error only for an HTTP response; a transport
// error comes as it is (a *url.Error around a *net.OpError, say), and
// the end of ctx as ctx.Err(), possibly wrapped.
func (c check) failed(ctx context.Context, doing string, err error, connected bool) Verdict {
	msg := fmt.Sprintf("%s at Prometheus %s: %v", doing, c.url, redact(err))
	var apiErr *promv1.Error
	switch {
	case errors.As(err, &apiErr):
		if apiErr.Type == promv1.ErrBadData {
			return Verdict{Reason: ReasonQueryInvalid, Message: msg}
		}
		// The client decodes vectors, scalars and matrices only: a query
		// whose result is a string ("up", quoted) fails to decode, and is
		// no more a gate than a matrix is.
		if apiErr.Type == promv1.ErrBadResponse && strings.HasPrefix(apiErr.Msg, "unexpected value type") {
			return Verdict{Reason: ReasonQueryInvalid, Message: msg + ", want an instant vector or a scalar"}
		}
		if apiErr.Detail != "" {
			msg += ": " + truncate(apiErr.Detail, 200)
		}
		return Verdict{Reason: ReasonQueryFailed, Message: msg}
	case unreachable(err) || (!connected && !errors.Is(ctx.Err(), context.Canceled)):
		// No connection, the dial hanging until the deadline included;
		// only the caller giving up first says nothing about Prometheus.
		if errors.Is(ctx.Err(), context.DeadlineExceeded) {
			msg = fmt.Sprintf("%s at Prometheus %s: no connection within the gates' timeout of %s", doing, c.url, c.timeout)
		}
		return Verdict{Reason: ReasonPrometheusUnreachable, Message: msg}
	case ctx.Err() != nil:
		// Connected, but no answer in time: Prometheus is there and slow
		// (or the caller gave up), which is a failed check, not an
		// unreachable Prometheus.
		if errors.Is(ctx.Err(), context.DeadlineExceeded) {
			msg = fmt.Sprintf("%s at Prometheus %s: no answer within the gates' timeout of %s", doing, c.url, c.timeout)
		}
		return Verdict{Reason: ReasonQueryFailed, Message: msg}
	default:
		return Verdict{Reason: ReasonQueryFailed, Message: msg}
	}
}

// unreachable reports whether err means no connection to Prometheus could
// be made: a failed name lookup, or a failed dial (refused, no route, the
// dial timing out).
func unreachable(err error) bool {
	var dnsErr *net.DNSError
	if errors.As(err, &dnsErr) {
		return true
	}
	var opErr *net.OpError
	return errors.As(err, &opErr) && opErr.Op == "dial"
}

// redact drops the password of a URL in a transport error, which quotes
// the request's URL: the message goes to the pool's status.
func redact(err error) error {
	var urlErr *url.Error
	if errors.As(err, &urlErr) {
		if u, perr := url.Parse(urlErr.URL); perr == nil {
			return &url.Error{Op: urlErr.Op, URL: u.Redacted(), Err: urlErr.Err}
		}
	}
	return err
}

func truncate(s string, n int) string {
	if len(s) <= n {
		return s
	}
	return s[:n] + "…"
}
