package measure

import (
	"context"
	"testing"
	"time"
)

func TestQuantileIsTheNearestRank(t *testing.T) {
	var s []time.Duration
	for i := 20; i >= 1; i-- { // unsorted on purpose
		s = append(s, time.Duration(i)*time.Millisecond)
	}
	for _, c := range []struct {
		q    float64
		want time.Duration
	}{{0.5, 10 * time.Millisecond}, {0.99, 20 * time.Millisecond}, {0.9, 18 * time.Millisecond}, {0.01, time.Millisecond}, {1, 20 * time.Millisecond}} {
		if got := Quantile(s, c.q); got != c.want {
			t.Errorf("Quantile(1..20 ms, %v) = %v, want %v", c.q, got, c.want)
		}
	}
	if s[0] != 20*time.Millisecond {
		t.Errorf("Quantile reordered its input: first is %v", s[0])
	}
	if got := Quantile([]time.Duration{7}, 0.5); got != 7 {
		t.Errorf("Quantile of one sample = %v, want 7ns", got)
	}
}

func TestFirstSeenKeepsTheFirstAndWakesTheWaiter(t *testing.T) {
	f := NewFirstSeen()
	first := time.Unix(100, 0)
	got := make(chan time.Time, 1)
	go func() {
		at, err := f.Wait(context.Background(), "k", 10*time.Second)
		if err != nil {
			t.Error(err)
		}
		got <- at
	}()
	f.Mark("k", first)
	f.Mark("k", first.Add(time.Second))
	if at := <-got; !at.Equal(first) {
		t.Errorf("Wait = %v, want the first mark %v", at, first)
	}
	if _, err := f.Wait(context.Background(), "never", 10*time.Millisecond); err == nil {
		t.Error("Wait for a key never marked returned no error")
	}
}
