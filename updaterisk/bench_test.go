package updaterisk_test

import (
	"context"
	"fmt"
	"testing"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/nodeward/nodeward/updategraph"
	"github.com/nodeward/nodeward/updaterisk"
)

// graph is n candidates, each with perCandidate of r risks, the risks'
// PromQL rules sharing q queries; every fourth risk's first rule is bad
// PromQL (one query shared by them all), so that its second decides.
func graph(n, perCandidate, r, q int) []updaterisk.Candidate {
	risks := make([]updategraph.Risk, r)
	for i := range risks {
		query := fmt.Sprintf(`nodeward_risk{case="clear"} * %d`, i%q+1) // 0: not exposed
		if i%q%2 == 1 {
			query = fmt.Sprintf(`nodeward_risk{case="exposed"} ^ %d`, i%q+1) // 1: exposed
		}
		rules := []updategraph.MatchingRule{promql(query)}
		if i%4 == 3 {
			rules = append([]updategraph.MatchingRule{promql("sum(")}, rules...)
		}
		risks[i] = newRisk(fmt.Sprintf("Risk%d", i), rules...)
	}
	out := make([]updaterisk.Candidate, n)
	for j := range out {
		out[j].Version = fmt.Sprintf("4.16.%d", j+1)
		for k := 0; k < perCandidate && k < r; k++ {
			out[j].Risks = append(out[j].Risks, risks[(j+k)%r])
		}
	}
	return out
}

// day is what a simulated day of passes did.
type day struct {
	passes, queries, asks, maxPerPass int64
	steadyPerHour                     float64       // queries per hour after the first hour
	decided                           time.Duration // until no candidate was Unknown
}

// interval is a pass's period: the CVO checks available updates every
// 2 to 4 minutes (pkg/start: resyncPeriod of 2 min); the middle of that.
const interval = 3 * time.Minute

// simulate runs passes for a day on the throttle's clock, each after the
// interval, or after RetryAfter when a candidate was Unknown (the CVO's
// requeue after a second).
func simulate(b *testing.B, url string, throttle updaterisk.Throttle, candidates []updaterisk.Candidate) day {
	ev, clk := newEvaluator(url, throttle)
	start := clk.now()
	var d day
	var last updaterisk.Stats
	var afterFirstHour int64
	decided := false
	for clk.now().Sub(start) < 24*time.Hour {
		e, err := ev.Evaluate(context.Background(), candidates, nil)
		if err != nil {
			b.Fatal(err)
		}
		s := ev.Stats()
		n := s.Queries - last.Queries
		d.passes++
		d.maxPerPass = max(d.maxPerPass, n)
		if clk.now().Sub(start) >= time.Hour {
			afterFirstHour += n
		}
		last = s
		if !decided && !anyUnknown(e) {
			d.decided, decided = clk.now().Sub(start), true
		}
		next := interval
		if e.RetryAfter > 0 {
			next = e.RetryAfter + time.Millisecond
		}
		clk.advance(next)
	}
	d.queries, d.asks = last.Queries, last.Queries+last.Cached+last.Throttled
	d.steadyPerHour = float64(afterFirstHour) / 23
	return d
}

func anyUnknown(e updaterisk.Evaluation) bool {
	for _, c := range e.Candidates {
		if c.Recommended.Status == metav1.ConditionUnknown {
			return true
		}
	}
	return false
}

// BenchmarkQueriesPerDay measures the Prometheus queries of a day of
// passes against a real Prometheus, with nodeward's throttle and with
// the CVO's (CVOThrottle, its cache exactly), and what the passes asked
// of the cache (each a query without one).
func BenchmarkQueriesPerDay(b *testing.B) {
	p := startPrometheus(b)
	for _, g := range []struct {
		name       string
		candidates []updaterisk.Candidate
	}{
		{"Lone1Rule", graph(1, 1, 1, 1)},
		{"40Candidates12Risks6Queries", graph(40, 3, 12, 6)},
		{"200Candidates60Risks20Queries", graph(200, 3, 60, 20)},
	} {
		for _, th := range []struct {
			name     string
			throttle updaterisk.Throttle
		}{{"nodeward", updaterisk.DefaultThrottle()}, {"CVO", updaterisk.CVOThrottle()}} {
			b.Run(g.name+"/"+th.name, func(b *testing.B) {
				var d day
				var took time.Duration
				for b.Loop() {
					start := time.Now()
					d = simulate(b, p.URL, th.throttle, g.candidates)
					took = time.Since(start)
				}
				b.ReportMetric(float64(d.queries), "queries/day")
				b.ReportMetric(d.steadyPerHour, "queries/h-after-1st")
				b.ReportMetric(float64(d.maxPerPass), "max-queries/pass")
				b.ReportMetric(float64(d.asks), "rule-asks/day")
				b.ReportMetric(float64(d.passes), "passes/day")
				b.ReportMetric(d.decided.Seconds(), "s-to-decide")
				b.ReportMetric(float64(took.Microseconds())/float64(d.passes), "µs/pass")
			})
		}
	}
}
