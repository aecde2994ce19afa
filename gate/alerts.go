package gate

import (
	"context"
	"fmt"
	"sort"
	"strconv"
	"strings"
	"time"

	promv1 "github.com/prometheus/client_golang/api/prometheus/v1"
	"github.com/prometheus/common/model"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/labels"
)

// alerts blocks on any firing alert whose labels the selector matches.
// Pending alerts are not yet a problem Prometheus vouches for, and
// grants are not held for them: the rule's for: says how long is enough.
func (c check) alerts(ctx context.Context, sel *metav1.LabelSelector) Verdict {
	selector, err := metav1.LabelSelectorAsSelector(sel)
	if err != nil { // checked by Validate
		return Verdict{Reason: ReasonGateInvalid, Message: fmt.Sprintf("gates.alerts: %v", err)}
	}
	tctx, connected := traced(ctx)
	res, err := c.prom.Alerts(tctx)
	if err != nil {
		return c.failed(ctx, "fetch the alerts", err, connected.Load())
	}
	var firing []promv1.Alert
	for _, a := range res.Alerts {
		if a.State == promv1.AlertStateFiring && selector.Matches(alertLabels(a.Labels)) {
			firing = append(firing, a)
		}
	}
	if len(firing) == 0 {
		return Verdict{Passing: true, Reason: ReasonPassing}
	}
	// Prometheus lists alerts in no promised order; the message names the
	// same alert on every evaluation so that the pool's condition does not
	// churn.
	sort.Slice(firing, func(i, j int) bool {
		a, b := alertName(firing[i].Labels), alertName(firing[j].Labels)
		if a != b {
			return a < b
		}
		return firing[i].Labels.String() < firing[j].Labels.String()
	})
	msg := fmt.Sprintf("alert %s firing since %s at Prometheus %s",
		describeAlert(firing[0].Labels), firing[0].ActiveAt.UTC().Format(time.RFC3339), c.url)
	if n := len(firing) - 1; n > 0 {
		msg += fmt.Sprintf(" (and %d more selected alerts firing)", n)
	}
	return Verdict{Reason: ReasonAlertFiring, Message: msg}
}

// alertLabels adapts an alert's labels to a labels.Selector.
type alertLabels model.LabelSet

func (l alertLabels) Has(name string) bool {
	_, ok := l[model.LabelName(name)]
	return ok
}

func (l alertLabels) Get(name string) string { return string(l[model.LabelName(name)]) }

func (l alertLabels) Lookup(name string) (string, bool) {
	v, ok := l[model.LabelName(name)]
	return string(v), ok
}

func alertName(ls model.LabelSet) string { return string(ls[model.AlertNameLabel]) }

var _ labels.Labels = alertLabels(nil)

// describeAlert writes an alert as PromQL writes a series:
// NodewardTestUnhealthy{instance="10.0.0.1:9100",severity="critical"}.
func describeAlert(ls model.LabelSet) string {
	names := make([]string, 0, len(ls))
	for n := range ls {
		if n != model.AlertNameLabel {
			names = append(names, string(n))
		}
	}
	sort.Strings(names)
	var b strings.Builder
	b.WriteString(alertName(ls))
	b.WriteByte('{')
	for i, n := range names {
		if i > 0 {
			b.WriteByte(',')
		}
		b.WriteString(n)
		b.WriteByte('=')
		b.WriteString(strconv.Quote(string(ls[model.LabelName(n)])))
	}
	b.WriteByte('}')
	return b.String()
}
