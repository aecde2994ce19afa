package updaterisk

import (
	"context"
	"errors"
	"testing"
	"time"
)

// fakeClock is the throttle's clock, moved by the test.
type fakeClock struct{ t time.Time }

func (c *fakeClock) now() time.Time          { return c.t }
func (c *fakeClock) advance(d time.Duration) { c.t = c.t.Add(d) }

// counted is a cache whose queries answer from exposure (a missing query
// fails) and are counted per query.
type counted struct {
	cache *ruleCache
	clock *fakeClock
	asked map[string]int
}

func newCounted(exposure map[string]answer) *counted {
	return newCountedWith(DefaultThrottle(), exposure)
}

func newCountedWith(throttle Throttle, exposure map[string]answer) *counted {
	c := &counted{clock: &fakeClock{t: time.Date(2026, 11, 28, 3, 0, 0, 0, time.UTC)}, asked: map[string]int{}}
	c.cache = newRuleCache(throttle, c.clock.now, func(_ context.Context, q string) answer {
		c.asked[q]++
		if a, ok := exposure[q]; ok {
			return a
		}
		return answer{err: errors.New("no such query")}
	})
	return c
}

func (c *counted) match(t *testing.T, q string) (bool, error) {
	t.Helper()
	return c.cache.match(context.Background(), q)
}

func (c *counted) expectQueries(t *testing.T, want map[string]int) {
	t.Helper()
	for q, n := range want {
		if c.asked[q] != n {
			t.Errorf("query %q made %d times, want %d (all: %v)", q, c.asked[q], n, c.asked)
		}
	}
}

func TestCacheAsksARuleOncePerHour(t *testing.T) {
	c := newCounted(map[string]answer{"a": {exposed: true}})
	for i := 0; i < 60; i++ { // a pass a minute for an hour
		if exposed, err := c.match(t, "a"); err != nil || !exposed {
			t.Fatalf("minute %d: %v, %v; want exposed", i, exposed, err)
		}
		c.clock.advance(time.Minute)
	}
	c.expectQueries(t, map[string]int{"a": 1})
	c.match(t, "a") // 60 minutes after the first query
	c.expectQueries(t, map[string]int{"a": 2})
	if s := (&Evaluator{cache: c.cache}).Stats(); s.Queries != 2 || s.Cached != 59 || s.Throttled != 0 {
		t.Errorf("stats %+v, want 2 queries, 59 cached", s)
	}
}

// TestCVOCacheAsksALoneRuleEveryPass: the CVO's cache queries the rule
// asked for when no other waits, however fresh its answer; the default
// throttle does not.
func TestCVOCacheAsksALoneRuleEveryPass(t *testing.T) {
	c := newCountedWith(CVOThrottle(), map[string]answer{"a": {exposed: true}})
	for i := 0; i < 20; i++ { // a pass each 3 minutes for an hour
		if exposed, err := c.match(t, "a"); err != nil || !exposed {
			t.Fatalf("pass %d: %v, %v; want exposed", i, exposed, err)
		}
		c.clock.advance(3 * time.Minute)
	}
	c.expectQueries(t, map[string]int{"a": 20})
}

func TestCacheQueriesOncePerSecondAndTheRestIsThrottled(t *testing.T) {
	c := newCounted(map[string]answer{"a": {exposed: true}, "b": {}})
	if _, err := c.match(t, "a"); err != nil {
		t.Fatal(err)
	}
	_, err := c.match(t, "b")
	if !errors.Is(err, errThrottled) {
		t.Fatalf("second rule in the same second: %v, want throttled", err)
	}
	c.clock.advance(time.Second) // the throttle allows a query strictly after one second
	if _, err := c.match(t, "b"); !errors.Is(err, errThrottled) {
		t.Fatalf("at exactly one second: %v, want throttled", err)
	}
	c.clock.advance(time.Millisecond)
	if exposed, err := c.match(t, "b"); err != nil || exposed {
		t.Fatalf("after the throttle: %v, %v; want not exposed", exposed, err)
	}
	c.expectQueries(t, map[string]int{"a": 1, "b": 1})
}

// TestCacheSpendsTheQueryOnTheStalestRule: callers asking a, b, c in this
// order each pass do not starve c. The pass's one query goes to the rule
// waiting longest, whoever asked.
func TestCacheSpendsTheQueryOnTheStalestRule(t *testing.T) {
	c := newCounted(map[string]answer{"a": {}, "b": {}, "c": {exposed: true}})
	pass := func() (errs int) {
		for _, q := range []string{"a", "b", "c"} {
			if _, err := c.match(t, q); err != nil {
				errs++
			}
		}
		c.clock.advance(2 * time.Second)
		return errs
	}
	for i, want := range []int{2, 1, 0} { // a; then b (waiting); then c
		if got := pass(); got != want {
			t.Fatalf("pass %d: %d rules without an answer, want %d", i, got, want)
		}
	}
	c.expectQueries(t, map[string]int{"a": 1, "b": 1, "c": 1})
	// An hour on, each pass refreshes one rule, the stalest: a, b, c in
	// turn, though a is asked first in every pass.
	c.clock.advance(time.Hour)
	for i := 1; i <= 3; i++ {
		if errs := pass(); errs != 0 {
			t.Fatalf("refresh pass %d: %d failures; cached answers should stand", i, errs)
		}
		if total := c.asked["a"] + c.asked["b"] + c.asked["c"]; total != 3+i {
			t.Fatalf("after refresh pass %d: queries %v, want one more per pass", i, c.asked)
		}
	}
	c.expectQueries(t, map[string]int{"a": 2, "b": 2, "c": 2})
}

func TestCacheKeepsFailuresAsAnswers(t *testing.T) {
	c := newCounted(nil)
	for i := 0; i < 3; i++ {
		if _, err := c.match(t, "broken"); err == nil || errors.Is(err, errThrottled) {
			t.Fatalf("pass %d: %v, want the query's failure", i, err)
		}
		c.clock.advance(10 * time.Minute)
	}
	c.expectQueries(t, map[string]int{"broken": 1})
}

func TestCacheForgetsAfterExpiration(t *testing.T) {
	c := newCounted(map[string]answer{"a": {exposed: true}, "b": {}})
	c.match(t, "a")
	c.clock.advance(25 * time.Hour)
	c.match(t, "b") // expires a, answers b
	c.clock.advance(time.Millisecond)
	// a was forgotten: asked again inside the throttle it has no answer.
	if _, err := c.match(t, "a"); !errors.Is(err, errThrottled) {
		t.Fatalf("a after 25h, within the throttle: %v, want throttled (no answer kept)", err)
	}
	if len(c.cache.entries) != 2 {
		t.Errorf("entries %v, want a (waiting) and b", c.cache.entries)
	}
}

// TestCacheKeepsNoAnswerOfACallerThatGaveUp: a query cut short by the
// caller's context is not the rule's answer.
func TestCacheKeepsNoAnswerOfACallerThatGaveUp(t *testing.T) {
	c := newCounted(map[string]answer{"a": {exposed: true}})
	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	if _, err := c.cache.match(ctx, "a"); !errors.Is(err, context.Canceled) {
		t.Fatalf("match with a canceled context: %v, want canceled", err)
	}
	c.clock.advance(2 * time.Second)
	if exposed, err := c.match(t, "a"); err != nil || !exposed {
		t.Fatalf("the next pass: %v, %v; want a fresh query's answer", exposed, err)
	}
	c.expectQueries(t, map[string]int{"a": 2})
}
