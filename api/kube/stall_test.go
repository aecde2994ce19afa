package kube

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"log/slog"
	"strings"
	"testing"
	"time"

	"k8s.io/client-go/util/retry"
)

// TestStallWarnerBacksOff: the first warning after Interval, then after
// gaps that double up to five minutes, each naming the server and the last
// error; an info line when the wait ends.
func TestStallWarnerBacksOff(t *testing.T) {
	var buf bytes.Buffer
	w := &StallWarner{Log: slog.New(slog.NewTextHandler(&buf, nil)), Server: "https://api.test:6443", What: "node watch"}
	t0 := time.Unix(0, 0)
	w.Pending(t0)
	w.Observe(errors.New("connection refused"))
	var warnedAt []time.Duration
	for s := time.Duration(0); s <= 20*time.Minute; s += time.Second {
		before := strings.Count(buf.String(), "level=WARN")
		w.Pending(t0.Add(s))
		if strings.Count(buf.String(), "level=WARN") > before {
			warnedAt = append(warnedAt, s)
		}
	}
	want := []time.Duration{30 * time.Second, 90 * time.Second, 210 * time.Second, 450 * time.Second, 750 * time.Second, 1050 * time.Second}
	if len(warnedAt) != len(want) {
		t.Fatalf("warnings at %v, want %v", warnedAt, want)
	}
	for i := range want {
		if warnedAt[i] != want[i] {
			t.Fatalf("warnings at %v, want %v", warnedAt, want)
		}
	}
	if !strings.Contains(buf.String(), "server=https://api.test:6443") || !strings.Contains(buf.String(), `err="connection refused"`) {
		t.Errorf("warning lacks the server or the error:\n%s", buf.String())
	}
	w.Reached(t0.Add(21*time.Minute), false)
	if !strings.Contains(buf.String(), "level=INFO msg=\"node watch synced\"") {
		t.Errorf("no info line after the wait ended:\n%s", buf.String())
	}
	buf.Reset()
	w.Pending(t0)
	w.Reached(t0.Add(time.Second), false)
	if buf.Len() != 0 {
		t.Errorf("a short wait logged:\n%s", buf.String())
	}
}

// TestRetryOnConflictKeepsTimeouts: a request that times out is an error,
// which client-go's RetryOnConflict turns into nil.
func TestRetryOnConflictKeepsTimeouts(t *testing.T) {
	timeout := fmt.Errorf("get node: %w", context.DeadlineExceeded)
	if err := RetryOnConflict(retry.DefaultBackoff, func() error { return timeout }); !errors.Is(err, context.DeadlineExceeded) {
		t.Errorf("RetryOnConflict lost a timeout: %v", err)
	}
	if err := RetryOnConflict(retry.DefaultBackoff, func() error { return nil }); err != nil {
		t.Errorf("success: %v", err)
	}
}
