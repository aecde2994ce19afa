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

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/watch"
	"k8s.io/client-go/tools/cache"
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

// flakyLW lists an empty NodeList, or fails while fail is set.
type flakyLW struct{ fail bool }

func (f *flakyLW) List(metav1.ListOptions) (runtime.Object, error) {
	if f.fail {
		return nil, errors.New("dial tcp: connection refused")
	}
	return &corev1.NodeList{}, nil
}

func (f *flakyLW) Watch(metav1.ListOptions) (watch.Interface, error) {
	if f.fail {
		return nil, errors.New("dial tcp: connection refused")
	}
	return watch.NewEmptyWatch(), nil
}

// TestStallWarnerSeesAWatchBreakAfterTheSync: after the first sync, an
// informer whose list and watch keep failing (an API server restart) warns
// with the server and the error once the interval has passed, and says so
// when a call succeeds again; calls that succeed say nothing.
func TestStallWarnerSeesAWatchBreakAfterTheSync(t *testing.T) {
	var buf bytes.Buffer
	w := &StallWarner{Log: slog.New(slog.NewTextHandler(&buf, nil)), Server: "https://api.test:6443", What: "node watch",
		Interval: 20 * time.Millisecond}
	lw := &flakyLW{}
	observed := cache.ToListerWatcherWithContext(w.ListerWatcher(lw))
	ctx := context.Background()
	if _, err := observed.ListWithContext(ctx, metav1.ListOptions{}); err != nil {
		t.Fatal(err)
	}
	if buf.Len() != 0 {
		t.Fatalf("a succeeding list logged: %s", buf.String())
	}
	lw.fail = true
	deadline := time.Now().Add(5 * time.Second)
	for !strings.Contains(buf.String(), "level=WARN") {
		if time.Now().After(deadline) {
			t.Fatalf("no warning while the list kept failing: %q", buf.String())
		}
		if _, err := observed.WatchWithContext(ctx, metav1.ListOptions{}); err == nil {
			t.Fatal("the failing watch succeeded")
		}
	}
	if out := buf.String(); !strings.Contains(out, "api.test:6443") || !strings.Contains(out, "connection refused") {
		t.Errorf("warning does not name the server and the error: %s", out)
	}
	lw.fail = false
	if _, err := observed.ListWithContext(ctx, metav1.ListOptions{}); err != nil {
		t.Fatal(err)
	}
	if !strings.Contains(buf.String(), "node watch synced") {
		t.Errorf("no info line once the list succeeded again: %s", buf.String())
	}
}
