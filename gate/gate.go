// Package gate evaluates an UpdatePool's health gates against Prometheus:
// the firing alerts that the pool's selector picks, and PromQL queries
// whose samples must lie within bounds. The coordinator asks before every
// grant and while nodes soak or canaries bake.
//
// Gates fail closed. A gate exists to stop a rollout while the cluster is
// unhealthy, and an answer that cannot be had is no evidence of health:
// Prometheus unreachable, an HTTP error, a response that does not parse, a
// query error or the evaluation's timeout all hold grants, as a firing
// alert does. The verdict's reason says which, and its message names the
// Prometheus, the alert or the query, so that the pool's status tells an
// operator what to fix. An operator who wants updates to go on without
// Prometheus removes the gates; nodeward never guesses.
//
// The package is a leaf: it links the API types and the Prometheus client,
// nothing else of nodeward.
package gate

import (
	"context"
	"fmt"
	"net"
	"net/http"
	"time"

	"github.com/prometheus/client_golang/api"
	promv1 "github.com/prometheus/client_golang/api/prometheus/v1"

	"github.com/nodeward/nodeward/api/v1alpha1"
)

// Verdict is one evaluation's answer.
type Verdict struct {
	// Passing is true only when every gate answered and passed.
	Passing bool
	// Reason is one of the Reason constants.
	Reason string
	// Message names what blocked: the alert (alertname and its labels) or
	// the query (its name, expression and the offending value), or the
	// error with the Prometheus it came from.
	Message string
}

// The reasons of a Verdict, fit for a condition's reason.
const (
	// ReasonPassing: no selected alert fires and every query passed.
	ReasonPassing = "GatesPassing"
	// ReasonAlertFiring: an alert the selector picks is firing (pending
	// alerts do not count).
	ReasonAlertFiring = "AlertFiring"
	// ReasonQueryEmpty: a query returned no sample.
	ReasonQueryEmpty = "QueryEmpty"
	// ReasonQueryOutOfBounds: a sample lies outside the query's min and
	// max (NaN lies outside any bound).
	ReasonQueryOutOfBounds = "QueryOutOfBounds"
	// ReasonQueryInvalid: Prometheus rejected the query as bad data (bad
	// PromQL, say), or it returned a string or a range vector.
	ReasonQueryInvalid = "QueryInvalid"
	// ReasonQueryFailed: Prometheus answered, but not with a result: an
	// execution error, a timeout, a 5xx or a response that does not parse.
	// Fetching the alerts fails with this reason too.
	ReasonQueryFailed = "QueryFailed"
	// ReasonPrometheusUnreachable: no connection to Prometheus (refused,
	// no such host, the dial timing out).
	ReasonPrometheusUnreachable = "PrometheusUnreachable"
	// ReasonGateInvalid: the spec is wrong (see Validate); nothing was
	// asked of Prometheus.
	ReasonGateInvalid = "GateInvalid"
)

// Evaluator evaluates gates with one HTTP client. It is safe for
// concurrent use.
type Evaluator struct {
	client *http.Client
}

// NewEvaluator evaluates with client; nil is a client of its own (the
// environment's proxy settings, a 5s dial timeout). No client timeout is
// needed: each evaluation is bounded by its gates' timeout. Queries are
// asked by GET (getOnly).
func NewEvaluator(client *http.Client) *Evaluator {
	if client == nil {
		transport := http.DefaultTransport.(*http.Transport).Clone()
		transport.DialContext = (&net.Dialer{Timeout: 5 * time.Second, KeepAlive: 30 * time.Second}).DialContext
		client = &http.Client{Transport: transport}
	}
	return &Evaluator{client: withGetOnly(client)}
}

// Evaluate checks the gates' alerts and then their queries, in order; the
// first that does not pass decides the verdict. The whole evaluation is
// bounded by the gates' timeout as well as by ctx. nil gates pass, and so
// do gates without Prometheus (object gates only, package objectgate).
func (e *Evaluator) Evaluate(ctx context.Context, gates *v1alpha1.Gates) Verdict {
	if gates == nil {
		return Verdict{Passing: true, Reason: ReasonPassing, Message: "no gates"}
	}
	if err := Validate(gates); err != nil {
		return Verdict{Reason: ReasonGateInvalid, Message: err.Error()}
	}
	if !asksPrometheus(gates) && gates.Prometheus == "" {
		return Verdict{Passing: true, Reason: ReasonPassing, Message: "no Prometheus gates"}
	}
	limit, _ := timeout(gates.Timeout) // checked by Validate
	ctx, cancel := context.WithTimeout(ctx, limit)
	defer cancel()

	base, _ := prometheusURL(gates.Prometheus) // checked by Validate
	client, err := api.NewClient(api.Config{Address: gates.Prometheus, Client: e.client})
	if err != nil {
		return Verdict{Reason: ReasonGateInvalid, Message: fmt.Sprintf("gates.prometheus %q: %v", base.Redacted(), err)}
	}
	c := check{prom: promv1.NewAPI(client), url: base.Redacted(), timeout: limit}

	if gates.Alerts != nil {
		if v := c.alerts(ctx, gates.Alerts); !v.Passing {
			return v
		}
	}
	for _, q := range gates.Queries {
		if v := c.query(ctx, q); !v.Passing {
			return v
		}
	}
	return Verdict{Passing: true, Reason: ReasonPassing, Message: passMessage(gates, c.url)}
}

// check is one evaluation against one Prometheus.
type check struct {
	prom    promv1.API
	url     string // redacted: the messages go to the pool's status
	timeout time.Duration
}

func passMessage(gates *v1alpha1.Gates, url string) string {
	msg := "no selected alert firing"
	if gates.Alerts == nil {
		msg = "alerts not checked"
	}
	switch n := len(gates.Queries); n {
	case 0:
	case 1:
		msg += ", 1 query passing"
	default:
		msg += fmt.Sprintf(", %d queries passing", n)
	}
	return msg + " at Prometheus " + url
}
