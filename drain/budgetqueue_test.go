package drain

import (
	"testing"
	"time"
)

// TestBudgetTurnFallsWithTheWait: the turn starts at first, falls by e
// every decay waited and never goes below zero; a refusal after the first
// does not move the wait's start, and a finished drain starts over.
func TestBudgetTurnFallsWithTheWait(t *testing.T) {
	t.Parallel()
	q := &budgetQueue{first: budgetTurnFirst, decay: budgetTurnDecay}
	t0 := time.Date(2026, 11, 26, 1, 0, 0, 0, time.UTC)
	if got := q.turn(t0); got != budgetTurnFirst {
		t.Fatalf("turn before any refusal %s, want %s", got, budgetTurnFirst)
	}
	q.refused(t0)
	q.refused(t0.Add(5 * time.Second)) // a later refusal: the wait started at t0
	for _, c := range []struct {
		waited time.Duration
		want   time.Duration
	}{
		{-time.Second, 400 * time.Millisecond}, // a clock step back: no wait, not a longer turn
		{0, 400 * time.Millisecond},
		{3 * time.Second, 147152 * time.Microsecond},
		{6 * time.Second, 54134 * time.Microsecond},
		{30 * time.Second, 18160 * time.Nanosecond},
	} {
		got := q.turn(t0.Add(c.waited))
		if d := got - c.want; d < -time.Microsecond || d > time.Microsecond {
			t.Errorf("turn after waiting %s: %s, want %s", c.waited, got, c.want)
		}
	}
	prev := q.turn(t0)
	for w := 100 * time.Millisecond; w < time.Minute; w += 100 * time.Millisecond {
		got := q.turn(t0.Add(w))
		if got > prev || got < 0 {
			t.Fatalf("turn after %s is %s, after %s less was %s: it must fall and stay ≥ 0", w, got, 100*time.Millisecond, prev)
		}
		prev = got
	}
	q.finished()
	if got := q.turn(t0.Add(time.Minute)); got != budgetTurnFirst {
		t.Errorf("turn after the drain finished %s, want %s again", got, budgetTurnFirst)
	}
}
