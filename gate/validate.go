package gate

import (
	"fmt"
	"math"
	"net/url"
	"strconv"
	"strings"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/nodeward/nodeward/api/v1alpha1"
)

// DefaultTimeout bounds one evaluation when gates.timeout is empty.
const DefaultTimeout = 5 * time.Second

// Validate checks a pool's gates without asking Prometheus anything; each
// error names the field at fault, as in
// `gates.queries[1].min "abc": not a decimal number`. nil gates are valid.
func Validate(gates *v1alpha1.Gates) error {
	if gates == nil {
		return nil
	}
	// Gates of objects only ask no Prometheus (package objectgate).
	if asksPrometheus(gates) || gates.Prometheus != "" {
		if _, err := prometheusURL(gates.Prometheus); err != nil {
			return fmt.Errorf("gates.prometheus %q: %w", gates.Prometheus, err)
		}
	}
	if gates.Alerts != nil {
		if _, err := metav1.LabelSelectorAsSelector(gates.Alerts); err != nil {
			return fmt.Errorf("gates.alerts: %w", err)
		}
	}
	if _, err := timeout(gates.Timeout); err != nil {
		return fmt.Errorf("gates.timeout %q: %w", gates.Timeout, err)
	}
	seen := make(map[string]int, len(gates.Queries))
	for i, q := range gates.Queries {
		field := fmt.Sprintf("gates.queries[%d]", i)
		// The name is what the pool's status shows for a failing query, so
		// it must tell the queries apart.
		if q.Name == "" {
			return fmt.Errorf("%s.name: required", field)
		}
		if first, dup := seen[q.Name]; dup {
			return fmt.Errorf("%s.name %q: already the name of gates.queries[%d]", field, q.Name, first)
		}
		seen[q.Name] = i
		if strings.TrimSpace(q.Query) == "" {
			return fmt.Errorf("%s.query: required", field)
		}
		// The PromQL itself is checked by Prometheus when evaluated (a
		// QueryInvalid verdict): parsing it here would link Prometheus's
		// whole query engine into the coordinator.
		lo, hi, err := bounds(q)
		if err != nil {
			return fmt.Errorf("%s.%w", field, err)
		}
		if q.Min != nil && q.Max != nil && lo > hi {
			return fmt.Errorf("%s: min %s is above max %s", field, *q.Min, *q.Max)
		}
	}
	return nil
}

// prometheusURL parses the base URL of the Prometheus HTTP API.
func prometheusURL(raw string) (*url.URL, error) {
	if raw == "" {
		return nil, fmt.Errorf("required")
	}
	u, err := url.Parse(raw)
	if err != nil {
		return nil, err
	}
	if u.Scheme != "http" && u.Scheme != "https" {
		return nil, fmt.Errorf("want an http:// or https:// URL")
	}
	if u.Host == "" {
		return nil, fmt.Errorf("no host")
	}
	// The client appends /api/v1/... to the path; a query or a fragment
	// would end up in every request, or be dropped, unnoticed.
	if u.RawQuery != "" || u.Fragment != "" {
		return nil, fmt.Errorf("want a base URL without a query or a fragment")
	}
	return u, nil
}

// timeout parses gates.timeout; empty is DefaultTimeout.
func timeout(raw string) (time.Duration, error) {
	if raw == "" {
		return DefaultTimeout, nil
	}
	d, err := time.ParseDuration(raw)
	if err != nil {
		return 0, fmt.Errorf("not a Go duration: %w", err)
	}
	if d <= 0 {
		return 0, fmt.Errorf("not positive")
	}
	return d, nil
}

// bounds parses a query's Min and Max; an unset bound is -Inf or +Inf. The
// error starts with the field's name relative to the query.
func bounds(q v1alpha1.GateQuery) (lo, hi float64, err error) {
	lo, hi = math.Inf(-1), math.Inf(1)
	if q.Min != nil {
		if lo, err = decimal(*q.Min); err != nil {
			return 0, 0, fmt.Errorf("min %q: %w", *q.Min, err)
		}
	}
	if q.Max != nil {
		if hi, err = decimal(*q.Max); err != nil {
			return 0, 0, fmt.Errorf("max %q: %w", *q.Max, err)
		}
	}
	return lo, hi, nil
}

// decimal parses a finite decimal number such as "0", "-1.5" or "1e3".
// strconv.ParseFloat alone would also take "NaN", "Inf", hexadecimal and
// underscores, none of which a bound should be.
func decimal(s string) (float64, error) {
	notDecimal := fmt.Errorf("not a decimal number")
	if s == "" || strings.Trim(s, "0123456789.+-eE") != "" {
		return 0, notDecimal
	}
	f, err := strconv.ParseFloat(s, 64)
	if err != nil || math.IsInf(f, 0) {
		return 0, notDecimal
	}
	return f, nil
}

// asksPrometheus reports whether gates have alerts or queries to ask of
// Prometheus.
func asksPrometheus(gates *v1alpha1.Gates) bool {
	return gates.Alerts != nil || len(gates.Queries) > 0
}
