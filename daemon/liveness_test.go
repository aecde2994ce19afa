package daemon

import (
	"strings"
	"testing"
	"time"
)

func TestLivenessFollowsEachLoopsCadenceAndBusyLimit(t *testing.T) {
	now := time.Unix(1_700_000_000, 0)
	l := NewLiveness(func() time.Time { return now })
	update := l.Register("update", 15*time.Second, time.Hour)
	publish := l.Register("publish", 6*time.Minute, time.Minute)
	if ok, why := l.Alive(); !ok {
		t.Fatalf("fresh loops: not alive: %s", why)
	}
	now = now.Add(10 * time.Second)
	update(true) // a long download starts
	now = now.Add(50 * time.Minute)
	publish(false)
	if ok, why := l.Alive(); !ok {
		t.Fatalf("busy within its limit: not alive: %s", why)
	}
	now = now.Add(11 * time.Minute)
	publish(false)
	if ok, why := l.Alive(); ok || !strings.Contains(why, "update: busy") {
		t.Fatalf("busy past its limit: alive=%v %q; want update named", ok, why)
	}
	update(false)
	now = now.Add(20 * time.Second)
	publish(false)
	if ok, why := l.Alive(); ok || !strings.Contains(why, "update: no turn") {
		t.Fatalf("idle past its cadence: alive=%v %q; want update named", ok, why)
	}
	update(false)
	if ok, why := l.Alive(); !ok {
		t.Fatalf("after a turn: not alive: %s", why)
	}
}
