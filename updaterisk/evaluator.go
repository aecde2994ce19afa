package updaterisk

import (
	"context"
	"fmt"
	"log/slog"
	"net/url"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/nodeward/nodeward/gate"
	"github.com/nodeward/nodeward/updategraph"
)

// DefaultQueryTimeout bounds one PromQL rule's query. The CVO allows five
// minutes; passes here are serialized, and a pass holding the coordinator
// that long would hold every pool's status, so a query slower than this
// is a failed rule (asked again after MinPerRule, as any failure).
const DefaultQueryTimeout = 30 * time.Second

// Options configure an Evaluator.
type Options struct {
	// Prometheus is the base URL of the Prometheus HTTP API the PromQL
	// rules are asked of.
	Prometheus string
	// Client makes the queries; nil is gate.NewEvaluator(nil).
	Client *gate.Evaluator
	// Now is the clock the throttle reads; nil is time.Now.
	Now func() time.Time
	// QueryTimeout bounds each query; zero is DefaultQueryTimeout.
	QueryTimeout time.Duration
	// Throttle; the zero value is DefaultThrottle().
	Throttle Throttle
	// Log receives a line per query; nil is slog.Default().
	Log *slog.Logger
}

// Evaluator evaluates the risks of conditional updates against one
// Prometheus, its cache kept from pass to pass. It is safe for concurrent
// use; passes run one at a time, as the throttle needs.
type Evaluator struct {
	client       *gate.Evaluator
	prometheus   string
	redactedURL  string
	queryTimeout time.Duration
	log          *slog.Logger

	// turn is held by the pass under way: a channel, not a mutex, so that
	// a caller waiting for its turn can give up with its ctx.
	turn  chan struct{}
	cache *ruleCache
}

// New returns an Evaluator with an empty cache.
func New(opts Options) *Evaluator {
	ev := &Evaluator{client: opts.Client, prometheus: opts.Prometheus, queryTimeout: opts.QueryTimeout,
		log: opts.Log, turn: make(chan struct{}, 1), redactedURL: opts.Prometheus}
	if ev.client == nil {
		ev.client = gate.NewEvaluator(nil)
	}
	if ev.queryTimeout <= 0 {
		ev.queryTimeout = DefaultQueryTimeout
	}
	if ev.log == nil {
		ev.log = slog.Default()
	}
	if u, err := url.Parse(opts.Prometheus); err == nil {
		ev.redactedURL = u.Redacted()
	}
	now, throttle := opts.Now, opts.Throttle
	if now == nil {
		now = time.Now
	}
	if throttle == (Throttle{}) {
		throttle = DefaultThrottle()
	}
	ev.cache = newRuleCache(throttle, now, ev.loggedQuery)
	return ev
}

func (ev *Evaluator) loggedQuery(ctx context.Context, promql string) answer {
	got := ev.queryRule(ctx, promql)
	ev.log.Debug("update risk rule queried", "prometheus", ev.redactedURL, "promql", promql, "exposed", got.exposed, "error", got.err)
	return got
}

// Candidate is an update whose edge carries risks.
type Candidate struct {
	// Version orders the candidates: a risk named by several is evaluated
	// as the highest version's graph defines it, as in the CVO.
	Version string
	Risks   []updategraph.Risk
}

// Result is one candidate's answer.
type Result struct {
	Version string
	// Recommended has Type, Status, Reason and Message; the caller sets it
	// on the candidate's conditions (meta.SetStatusCondition), which keeps
	// its transition time while the status stands.
	Recommended metav1.Condition
	// Invalid lists the candidate's invalid rules, each naming its risk
	// and index; the other rules were evaluated.
	Invalid error
	// Dropped is set when a risk of the candidate has no valid rule: the
	// CVO drops such a candidate, and it must not be offered (its
	// Recommended is False, ReasonInvalidRisk).
	Dropped bool
}

// Evaluation is the answer of a pass.
type Evaluation struct {
	// Candidates are in the order given.
	Candidates []Result
	// Applies is each evaluated risk's condition, by name.
	Applies map[string]metav1.Condition
	// RetryAfter is non-zero when an exposure is unknown: the CVO asks
	// again this soon (a throttled rule gets its query then).
	RetryAfter time.Duration
}

// Stats count what the cache did since the Evaluator was made.
type Stats struct {
	// Queries made to Prometheus.
	Queries int64
	// Cached answers given without a query.
	Cached int64
	// Throttled: rules with no answer yet while Prometheus might not be
	// asked, each a failure of its rule.
	Throttled int64
}

// Stats returns the counts so far, without waiting for a pass under way.
func (ev *Evaluator) Stats() Stats {
	c := &ev.cache.stats
	return Stats{Queries: c.queries.Load(), Cached: c.cached.Load(), Throttled: c.throttled.Load()}
}

func (ev *Evaluator) acquire(ctx context.Context) error {
	select {
	case ev.turn <- struct{}{}:
		return nil
	case <-ctx.Done():
		return fmt.Errorf("wait for the update risk evaluation under way: %w", context.Cause(ctx))
	}
}

func (ev *Evaluator) release() { <-ev.turn }
