package updaterisk

import (
	"context"
	"errors"
	"fmt"
	"sync/atomic"
	"time"
)

// Throttle is how often PromQL rules may be asked of Prometheus.
type Throttle struct {
	// MinBetweenQueries is the least time from the end of one query to
	// the start of the next, whatever their rules: one Prometheus query
	// per evaluation pass at most, since a pass asks all its rules within
	// a few milliseconds.
	MinBetweenQueries time.Duration
	// MinPerRule is the least time before the same rule is asked again;
	// its answer, an error included, stands until then.
	MinPerRule time.Duration
	// Expiration drops an answer this old, or a rule asked for but never
	// queried this long ago, so that rules no graph carries any more are
	// forgotten.
	Expiration time.Duration
	// AskFreshWhenNoneWaits queries the rule asked for, however fresh its
	// answer, when no other rule waits for a query: what the CVO's cache
	// does (so a risk graph with a single PromQL rule has it queried on
	// every pass, each two to four minutes, not once an hour). Off,
	// MinPerRule holds for every rule.
	AskFreshWhenNoneWaits bool
}

// DefaultThrottle returns the CVO's figures (pkg/clusterconditions/promql,
// NewPromQL): one query a second, a rule once an hour, answers kept a
// day; without the CVO's extra queries of a fresh rule.
func DefaultThrottle() Throttle {
	return Throttle{MinBetweenQueries: time.Second, MinPerRule: time.Hour, Expiration: 24 * time.Hour}
}

// CVOThrottle is the CVO's cache exactly, AskFreshWhenNoneWaits included:
// the reference the benchmarks compare with.
func CVOThrottle() Throttle {
	t := DefaultThrottle()
	t.AskFreshWhenNoneWaits = true
	return t
}

// errThrottled: a rule not asked yet while Prometheus may not be asked;
// a failure of that rule, as in the CVO.
var errThrottled = errors.New("throttled")

// answer is what a query said of a rule: exposed, or why not known.
type answer struct {
	exposed bool
	err     error
}

// entry is the cache's memory of one rule.
type entry struct {
	// answered is when its last query ended; zero: never queried.
	answered time.Time
	// asked is when a caller last asked for it.
	asked  time.Time
	answer answer
}

// waiting reports whether a caller asked for the rule since its last
// query, so that a query for it would serve someone.
func (e *entry) waiting() bool { return e.asked.After(e.answered) }

// counters are Stats as the cache counts them: read without waiting for
// a pass (a metrics scrape must not).
type counters struct{ queries, cached, throttled atomic.Int64 }

// ruleCache caches the answers of PromQL rules, keyed by their query,
// under a Throttle. It is not safe for concurrent use: the Evaluator
// serializes its passes.
type ruleCache struct {
	throttle Throttle
	now      func() time.Time
	// query asks Prometheus about one rule.
	query func(ctx context.Context, promql string) answer

	lastQuery time.Time // when the last query ended
	entries   map[string]*entry
	stats     counters
}

func newRuleCache(throttle Throttle, now func() time.Time, query func(context.Context, string) answer) *ruleCache {
	return &ruleCache{throttle: throttle, now: now, query: query, entries: map[string]*entry{}}
}

// match answers for the rule whose query is promql: from the cache, or by
// one query to Prometheus, which goes to the rule waiting longest (this
// one or another): without that, callers asking their rules in the same
// order each pass would refresh the first ones for ever and starve the
// rest.
func (c *ruleCache) match(ctx context.Context, promql string) (bool, error) {
	now := c.now()
	defer c.noteAsked(promql, now)
	c.expire(now)
	if next := c.lastQuery.Add(c.throttle.MinBetweenQueries); !now.After(next) {
		return c.cached(promql, next)
	}
	target := c.stalest()
	switch {
	case target == "":
		// None waits. The CVO then asks for this rule however fresh
		// its answer; MinPerRule need not give way.
		if e := c.entries[promql]; !c.throttle.AskFreshWhenNoneWaits && e != nil && !e.answered.IsZero() && now.Sub(e.answered) < c.throttle.MinPerRule {
			c.stats.cached.Add(1)
			return e.answer.exposed, e.answer.err
		}
		target = promql
	case now.Sub(c.entries[target].answered) < c.throttle.MinPerRule:
		// Even the stalest answer is fresh: nothing is due but a rule
		// never answered.
		if e := c.entries[promql]; e != nil && !e.answered.IsZero() {
			c.stats.cached.Add(1)
			return e.answer.exposed, e.answer.err
		}
		target = promql
	}
	got := c.query(ctx, target)
	c.stats.queries.Add(1)
	c.lastQuery = c.now()
	if ctx.Err() != nil {
		// The caller gave up: the failure says nothing of the rule, and
		// kept as its answer it would stand for MinPerRule.
		return false, fmt.Errorf("query %q not answered: %w", target, context.Cause(ctx))
	}
	e := c.entry(target)
	e.answered, e.answer = c.lastQuery, got
	if target == promql {
		return got.exposed, got.err
	}
	return c.cached(promql, c.lastQuery.Add(c.throttle.MinBetweenQueries))
}

// cached is the rule's last answer, or errThrottled until next when it
// has none.
func (c *ruleCache) cached(promql string, next time.Time) (bool, error) {
	if e := c.entries[promql]; e != nil && !e.answered.IsZero() {
		c.stats.cached.Add(1)
		return e.answer.exposed, e.answer.err
	}
	c.stats.throttled.Add(1)
	return false, fmt.Errorf("%w: Prometheus is asked at most once per %s, next at %s", errThrottled, c.throttle.MinBetweenQueries, next.UTC().Format(time.RFC3339))
}

func (c *ruleCache) entry(promql string) *entry {
	e := c.entries[promql]
	if e == nil {
		e = &entry{}
		c.entries[promql] = e
	}
	return e
}

func (c *ruleCache) noteAsked(promql string, at time.Time) { c.entry(promql).asked = at }

// stalest is the waiting rule answered longest ago (never is longest),
// the one waiting longest among equals; "" when none waits.
func (c *ruleCache) stalest() string {
	var best string
	var b *entry
	for k, e := range c.entries {
		if !e.waiting() {
			continue
		}
		if b == nil || e.answered.Before(b.answered) ||
			e.answered.Equal(b.answered) && (e.asked.Before(b.asked) || e.asked.Equal(b.asked) && k < best) {
			best, b = k, e
		}
	}
	return best
}

// expire forgets answers older than the Expiration, and rules asked for
// that long ago but never answered.
func (c *ruleCache) expire(now time.Time) {
	for k, e := range c.entries {
		since := e.answered
		if since.IsZero() {
			since = e.asked
		}
		if now.Sub(since) > c.throttle.Expiration {
			delete(c.entries, k)
		}
	}
}
